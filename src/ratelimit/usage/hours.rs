//! UTC hours, the buckets usage is counted in: an [`Hour`] is a whole hour since the Unix epoch,
//! written `2025-01-31T13:00:00Z` in answers and `2025013113` in Redis keys, and read from the
//! `from` and `to` of `GET /snowgate/usage` ([`parse`]). Plain calendar arithmetic (Howard
//! Hinnant's `days_from_civil`), tested without a clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// A UTC hour: hours since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hour(pub u32);

impl Hour {
    /// The hour now, by this machine's clock.
    pub fn now() -> Hour {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Hour(u32::try_from(secs / 3600).unwrap_or(u32::MAX))
    }

    /// Its first second, in seconds since the epoch.
    pub fn start_secs(self) -> u64 {
        u64::from(self.0) * 3600
    }

    /// `n` hours earlier (never before the epoch).
    pub fn back(self, n: u32) -> Hour {
        Hour(self.0.saturating_sub(n))
    }

    /// Year, month, day and hour.
    fn civil(self) -> (i64, u32, u32, u32) {
        let days = i64::from(self.0 / 24);
        let (y, m, d) = civil_from_days(days);
        (y, m, d, self.0 % 24)
    }

    /// `2025013113`, as in the Redis keys.
    pub fn compact(self) -> String {
        let (y, m, d, h) = self.civil();
        format!("{y:04}{m:02}{d:02}{h:02}")
    }

    /// `2025-01-31T13:00:00Z`, as in answers.
    pub fn iso(self) -> String {
        let (y, m, d, h) = self.civil();
        format!("{y:04}-{m:02}-{d:02}T{h:02}:00:00Z")
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `days` after 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Which end of a range a value is read for: a bare date means its first hour as `from`, its
/// last as `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    From,
    To,
}

/// Reads a UTC hour or date: `2025-01-31` (a whole day), `2025-01-31T13`, `2025-01-31T13:00`,
/// `2025-01-31T13:00:00`, each time optionally followed by `Z`; minutes and seconds pick the hour
/// they fall in. `Err` says what is wrong (not echoing `text`), for a 400.
pub fn parse(text: &str, end: End) -> Result<Hour, String> {
    const FORMAT: &str = "expected a UTC date or hour: YYYY-MM-DD or YYYY-MM-DDTHH[:MM[:SS]][Z]";
    let bad = || FORMAT.to_string();
    let (date, time) = match text.split_once(['T', 't', ' ']) {
        Some((date, time)) => (date, Some(time.strip_suffix(['Z', 'z']).unwrap_or(time))),
        None => (text, None),
    };
    let number = |s: &str, len: usize| -> Result<u32, String> {
        if s.len() != len || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    let mut parts = date.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let (y, m, d) = (number(y, 4)?, number(m, 2)?, number(d, 2)?);
    if y < 1970 || !(1..=12).contains(&m) || d == 0 || d > days_in_month(i64::from(y), m) {
        return Err("no such date (years from 1970)".to_string());
    }
    let hour = match time {
        None => match end {
            End::From => 0,
            End::To => 23,
        },
        Some(time) => {
            let mut fields = time.split(':');
            let h = number(fields.next().unwrap_or_default(), 2)?;
            let rest: Vec<&str> = fields.collect();
            if rest.len() > 2 {
                return Err(bad());
            }
            for (i, f) in rest.iter().enumerate() {
                let v = number(f, 2)?;
                // A leap second (:60) is no hour of its own.
                if v > 59 + u32::from(i == 1) {
                    return Err(bad());
                }
            }
            if h > 23 {
                return Err(bad());
            }
            h
        }
    };
    let days = days_from_civil(i64::from(y), m, d);
    let hours = days * 24 + i64::from(hour);
    u32::try_from(hours)
        .map(Hour)
        .map_err(|_| "too far in the future".to_string())
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_are_written_in_utc() {
        assert_eq!(Hour(0).iso(), "1970-01-01T00:00:00Z");
        assert_eq!(Hour(0).compact(), "1970010100");
        // 2024-02-29T13:00:00Z is 1709211600 s after the epoch.
        let h = Hour(1_709_211_600 / 3600);
        assert_eq!(h.iso(), "2024-02-29T13:00:00Z");
        assert_eq!(h.compact(), "2024022913");
        assert_eq!(h.start_secs(), 1_709_211_600);
    }

    #[test]
    fn dates_and_hours_read_back_as_written() {
        for h in [0u32, 1, 23, 24, 1_000_000, 474_779, 500_000] {
            let hour = Hour(h);
            assert_eq!(parse(&hour.iso(), End::From), Ok(hour));
            assert_eq!(parse(&hour.iso(), End::To), Ok(hour));
        }
        let day = parse("2024-02-29", End::From).unwrap();
        assert_eq!(day.iso(), "2024-02-29T00:00:00Z");
        assert_eq!(
            parse("2024-02-29", End::To).unwrap().iso(),
            "2024-02-29T23:00:00Z"
        );
        for same in [
            "2024-02-29T13",
            "2024-02-29T13Z",
            "2024-02-29T13:59",
            "2024-02-29T13:00:59Z",
            "2024-02-29t13:00:00z",
        ] {
            assert_eq!(
                parse(same, End::From).map(Hour::iso),
                Ok("2024-02-29T13:00:00Z".into()),
                "{same}"
            );
        }
    }

    #[test]
    fn anything_else_is_refused_saying_what_is_expected() {
        for bad in [
            "",
            "yesterday",
            "2023-02-29",
            "2024-13-01",
            "2024-00-10",
            "2024-1-01",
            "1969-12-31",
            "2024-02-29T24",
            "2024-02-29T13:61",
            "2024-02-29T13:00:00:00",
            "2024-02-29T13:00+02:00",
            "2024-02-29T",
            "+2024-02-29",
            "2024-02-29T1",
        ] {
            assert!(parse(bad, End::From).is_err(), "{bad:?} was accepted");
        }
        assert!(parse("soon", End::To).unwrap_err().contains("YYYY-MM-DD"));
    }
}
