//! The two forms of time AWS sign-in reads and writes, done by hand so that
//! no date crate is needed: SigV4's `X-Amz-Date` (`20260101T000000Z`,
//! always UTC) and the ISO 8601 expiry times STS and the metadata services
//! give credentials (`2026-12-06T21:00:00Z`).
//!
//! Days are turned into calendar dates and back with Howard Hinnant's
//! civil-from-days and days-from-civil algorithms (proleptic Gregorian
//! calendar, exact for every year a credential can name).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SECONDS_PER_DAY: u64 = 86_400;

/// `time` as SigV4's `X-Amz-Date`: `YYYYMMDDTHHMMSSZ` in UTC, with the
/// fraction of a second dropped (as botocore's `strftime` drops it). A time
/// before 1970 is taken as 1970-01-01T00:00:00Z.
pub fn amz_date(time: SystemTime) -> String {
    let seconds = unix_seconds(time);
    let (year, month, day) = civil_from_days((seconds / SECONDS_PER_DAY) as i64);
    let of_day = seconds % SECONDS_PER_DAY;
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// Whole seconds from 1970 to `time` (0 before 1970).
pub(crate) fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The time an ISO 8601 timestamp names: `YYYY-MM-DDTHH:MM:SS`, with an
/// optional fraction of a second, then `Z` or an offset (`+01:00`,
/// `-0500`). A time without a zone is refused, as it names no instant.
pub fn parse_iso8601(text: &str) -> Result<SystemTime, String> {
    let invalid = |why: &str| {
        format!("{text:?} is not an ISO 8601 time such as 2026-12-06T21:00:00Z ({why})")
    };
    let bytes = text.as_bytes();
    if !text.is_ascii() {
        return Err(invalid("it holds a character that is not ASCII"));
    }
    if bytes.len() < 20 {
        return Err(invalid("too short"));
    }
    let number = |from: usize, to: usize| -> Result<u64, String> {
        let part = &text[from..to];
        if part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse().map_err(|_| invalid("a field is out of range"))
        } else {
            Err(invalid("a field is not a number"))
        }
    };
    for (at, separator) in [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')] {
        if bytes[at] != separator {
            return Err(invalid("a separator is missing"));
        }
    }
    if bytes[10] != b'T' && bytes[10] != b't' && bytes[10] != b' ' {
        return Err(invalid("no T between the date and the time"));
    }
    let year = number(0, 4)?;
    let month = number(5, 7)?;
    let day = number(8, 10)?;
    let hour = number(11, 13)?;
    let minute = number(14, 16)?;
    let second = number(17, 19)?;
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(invalid("a field is out of range"));
    }

    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return Err(invalid("a dot without a fraction"));
        }
        let mut scale = 100_000_000u32;
        for digit in fraction.bytes().take(digits.min(9)) {
            nanos += u32::from(digit - b'0') * scale;
            scale /= 10;
        }
        rest = &fraction[digits..];
    }
    let offset_seconds: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return Err(invalid("no zone: end it with Z or an offset")),
            };
            let zone = rest[1..].replace(':', "");
            if zone.len() != 4 || !zone.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid("the offset is not HH:MM"));
            }
            let hours: i64 = zone[..2].parse().map_err(|_| invalid("bad offset"))?;
            let minutes: i64 = zone[2..].parse().map_err(|_| invalid("bad offset"))?;
            sign * (hours * 3600 + minutes * 60)
        }
    };

    let days = days_from_civil(year as i64, month as u32, day as u32);
    let local = days * SECONDS_PER_DAY as i64 + (hour * 3600 + minute * 60 + second) as i64;
    let utc = local - offset_seconds;
    let utc = u64::try_from(utc).map_err(|_| invalid("before 1970"))?;
    Ok(UNIX_EPOCH + Duration::new(utc, nanos))
}

fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The date `days` after 1970-01-01, as (year, month 1-12, day 1-31).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The days from 1970-01-01 to the date (year, month 1-12, day 1-31).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let shifted_month = i64::from(if month > 2 { month - 3 } else { month + 9 });
    let day_of_year = (153 * shifted_month + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn formats_known_times() {
        assert_eq!(amz_date(UNIX_EPOCH), "19700101T000000Z");
        // AWS's SigV4 examples.
        assert_eq!(amz_date(at(1_440_938_160)), "20150830T123600Z");
        assert_eq!(amz_date(at(1_369_353_600)), "20130524T000000Z");
        // A leap day, the last second of a year, and a fraction dropped.
        assert_eq!(amz_date(at(1_709_208_000)), "20240229T120000Z");
        assert_eq!(amz_date(at(1_767_225_599)), "20251231T235959Z");
        assert_eq!(
            amz_date(at(1_767_225_600) + Duration::from_millis(999)),
            "20260101T000000Z"
        );
        assert_eq!(amz_date(at(4_102_444_800)), "21000101T000000Z");
        assert_eq!(
            amz_date(UNIX_EPOCH - Duration::from_secs(5)),
            "19700101T000000Z"
        );
    }

    #[test]
    fn days_round_trip() {
        for days in (-800_000..800_000).step_by(997) {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(
                days_from_civil(year, month, day),
                days,
                "{year}-{month}-{day}"
            );
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn parses_known_times() {
        assert_eq!(parse_iso8601("1970-01-01T00:00:00Z"), Ok(UNIX_EPOCH));
        assert_eq!(parse_iso8601("2026-01-01T00:00:00Z"), Ok(at(1_767_225_600)));
        assert_eq!(parse_iso8601("2024-02-29T12:00:00Z"), Ok(at(1_709_208_000)));
        assert_eq!(
            parse_iso8601("2026-01-01T00:00:00.250Z"),
            Ok(at(1_767_225_600) + Duration::from_millis(250))
        );
        assert_eq!(
            parse_iso8601("2026-01-01T01:00:00+01:00"),
            Ok(at(1_767_225_600))
        );
        assert_eq!(
            parse_iso8601("2025-12-31T19:00:00-0500"),
            Ok(at(1_767_225_600))
        );
        assert_eq!(parse_iso8601("2026-12-06T21:00:00Z"), Ok(at(1_796_590_800)));
    }

    #[test]
    fn refuses_what_is_not_a_time() {
        for text in [
            "",
            "2026-01-01",
            "2026-01-01T00:00:00",
            "2026-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026/01/01T00:00:00Z",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00+1",
            "20260101T000000Z",
            "1969-12-31T23:59:59Z",
        ] {
            let error = parse_iso8601(text).expect_err(text);
            assert!(error.contains("ISO 8601"), "{error}");
        }
    }
}
