//! Durations in the config file (`"500ms"`, `"2s"`, `"1m"`), read with humantime; a value that
//! does not read says what it was and what would (serde's own message for humantime only says
//! "expected a duration", and the config's error masks quoted values, which may be secrets: a
//! duration never is, so it is shown in backticks).

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

/// `text` as a duration, or the error a config error shows.
pub fn parse(text: &str) -> Result<Duration, NotADuration> {
    humantime::parse_duration(text).map_err(|_| {
        let shown: String = text.chars().take(40).collect();
        NotADuration(shown.replace('`', "'"))
    })
}

/// A duration that does not read: it says what it was (its first 40 characters) and what would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a duration: write {EXAMPLES}")]
pub struct NotADuration(String);

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
}
