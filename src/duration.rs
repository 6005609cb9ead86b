//! Durations in the config file (`"500ms"`, `"2s"`, `"1m"`), read with humantime: the one parser
//! of every duration key, and the one place their bound lives. A value over [`MAX`] is refused
//! here, whatever key it is for, so that no duration read from a file can overflow
//! `Instant::now() + d` on the request path (`"1000000 years"` would). Every duration key of
//! the example config is tried over the bound by `tests/config_errors.rs`, so a key read another
//! way fails it.
//!
//! A value that does not read says what it was and what would (serde's own message for
//! humantime only says "expected a duration", and the config's error masks quoted values, which
//! may be secrets: a duration never is, so it is shown in backticks).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// The examples every duration error gives.
const EXAMPLES: &str = "a number and a unit, e.g. `500ms`, `2s`, `1m`";

/// Reads a duration string.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse(&text).map_err(serde::de::Error::custom)
}

/// Writes it back as humantime does.
pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*value))
}

/// `Option<Duration>` fields: absent (with `#[serde(default)]`) is `None`.
pub mod option {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        super::deserialize(d).map(Some)
    }
}

/// The longest duration any key takes (365 days).
pub const MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// `text` as a duration of at most [`MAX`], or the error a config error shows.
pub fn parse(text: &str) -> Result<Duration, NotADuration> {
    let shown = || text.chars().take(40).collect::<String>().replace('`', "'");
    match humantime::parse_duration(text) {
        Ok(d) if d <= MAX => Ok(d),
        Ok(_) => Err(NotADuration::TooLong(shown())),
        Err(_) => Err(NotADuration::Unreadable(shown())),
    }
}

/// A duration refused: it says what it was (its first 40 characters) and what would do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotADuration {
    #[error("`{0}` is not a duration: write {EXAMPLES}")]
    Unreadable(String),
    #[error("`{0}` is too long: must be at most 365 days")]
    TooLong(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_duration_names_itself_and_an_example() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        let e = parse("200").unwrap_err().to_string();
        assert!(e.contains("`200`") && e.contains("`500ms`"), "{e}");
        assert!(parse("2 fortnights")
            .unwrap_err()
            .to_string()
            .contains("`2 fortnights`"));
    }

    #[test]
    fn every_duration_is_bounded_by_the_parser() {
        assert_eq!(parse("365days"), Ok(MAX));
        for text in ["366days", "1000000 years"] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains("at most 365 days"), "{text}: {e}");
        }
        // Past what a duration can hold at all: not a duration.
        assert!(parse("584942417355years").is_err());
    }
}
