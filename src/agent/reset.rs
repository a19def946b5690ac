//! When a limit lifts, read from what the agent said: JSON fields (`"resets_at": 1773158400`,
//! `resets_in_seconds`), and texts such as `resets 12:43pm (UTC)`, `resets Sep 24, 5pm (UTC)`,
//! `try again at Aug 8th, 2026 12:30 PM`, `try again in 3 days 6 hours 57 minutes`. A time
//! without a zone is local; a time of day is its next occurrence.

use chrono::{DateTime, Datelike, FixedOffset, Local, NaiveDate, NaiveTime, Offset, TimeZone, Utc};
use serde_json::Value;

use super::text::{as_f64, strip_prefix_ci};

/// The moment an attempt is judged at, and the local time zone for times printed without one.
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    now: DateTime<Utc>,
    /// The local time zone (offset, IANA name); detected on first use unless set by
    /// [`Clock::with_local_zone`].
    zone: Option<(FixedOffset, Option<String>)>,
}

impl Clock {
    pub(crate) fn new(now: DateTime<Utc>) -> Clock {
        Clock { now, zone: None }
    }

    /// Sets the local time zone used for reset times printed without a zone (or in the named
    /// zone). By default it is the machine's: `Local`'s offset and the name from `TZ`,
    /// `/etc/timezone` or `/etc/localtime`.
    #[cfg(test)]
    pub(crate) fn with_local_zone(mut self, offset: FixedOffset, name: Option<&str>) -> Clock {
        self.zone = Some((offset, name.map(str::to_owned)));
        self
    }

    /// The moment the attempt is judged at.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// Reads when a limit lifts from the text after the signal (`lower` is its ASCII-lowercase
    /// copy, same length).
    pub(crate) fn parse_reset(&mut self, text: &str, lower: &str) -> Option<DateTime<Utc>> {
        let now = self.now;
        // A JSON field, perhaps inside an escaped JSON string: `"resets_at":1773158400`.
        for key in ["resets_at", "resetsat", "reset_at", "resets_in_seconds"] {
            let mut from = 0;
            while let Some(p) = lower[from..].find(key) {
                let end = from + p + key.len();
                from = end;
                let value = text[end..].trim_start_matches(['\\', '"', ':', ' ']);
                let skipped = &text[end..text.len() - value.len()];
                if !skipped.contains(':') {
                    continue; // a word, not a field
                }
                let Some(n) = leading_u64(value) else {
                    continue;
                };
                if key == "resets_in_seconds" {
                    let secs = n.min(60 * 86_400) as i64;
                    return now.checked_add_signed(chrono::TimeDelta::try_seconds(secs)?);
                }
                if let Some(t) = epoch(&Value::from(n)) {
                    return Some(t);
                }
            }
        }
        // Claude's old `Claude AI usage limit reached|<epoch>`.
        if let Some(p) = lower.find("limit reached|")
            && let Some(t) = epoch_prefix(&text[p + 14..])
        {
            return Some(t);
        }
        for key in [
            "resets at ",
            "reset at ",
            "resets on ",
            "resets ",
            "try again at ",
            "try again in ",
            "try again on ",
            "try again ",
            "retry after ",
            "retry in ",
            "reset in ",
            "available again at ",
            "available again in ",
        ] {
            let mut from = 0;
            while let Some(p) = lower[from..].find(key) {
                let start = from + p + key.len();
                let mut when = &text[start..];
                if key.ends_with(" in ") {
                    when = &text[start - 3..];
                }
                if let Some(t) = self.parse_when(when) {
                    return Some(t);
                }
                from = start;
            }
        }
        None
    }

    /// `in 3 days 6 hours`, `12:43pm (UTC)`, `Sep 24, 5pm (UTC)`, `Aug 8th, 2026 12:30 PM`,
    /// `3:28 PM.`: the next such instant after `now`.
    fn parse_when(&mut self, s: &str) -> Option<DateTime<Utc>> {
        let s = s.trim_start();
        if let Some(rest) = strip_prefix_ci(s, "in ") {
            let secs = parse_duration(rest)?;
            return self
                .now
                .checked_add_signed(chrono::TimeDelta::try_seconds(secs)?);
        }
        let s = strip_prefix_ci(s, "at ")
            .or_else(|| strip_prefix_ci(s, "on "))
            .unwrap_or(s);
        let (date, rest) = match parse_month_day(s) {
            Some((date, rest)) => (Some(date), rest),
            None => (None, s),
        };
        let rest = rest.trim_start_matches([' ', ',']);
        let rest = strip_prefix_ci(rest, "at ").unwrap_or(rest);
        let (time, rest) = match parse_clock(rest) {
            Some((t, rest)) => (Some(t), rest),
            None => (None, rest),
        };
        if date.is_none() && time.is_none() {
            return None;
        }
        let offset = self.resolve_zone(zone_name(rest))?;
        instant(date, time, offset, self.now)
    }

    fn local_zone(&mut self) -> &(FixedOffset, Option<String>) {
        let now = self.now;
        self.zone.get_or_insert_with(|| {
            let offset = Local.offset_from_utc_datetime(&now.naive_utc()).fix();
            (offset, detect_zone_name())
        })
    }

    /// The offset of a zone named in a message: none named → local; UTC/GMT(+n); the local zone's
    /// own name. Another named zone cannot be resolved without a time zone database: `None`.
    fn resolve_zone(&mut self, name: Option<&str>) -> Option<FixedOffset> {
        let Some(name) = name else {
            return Some(self.local_zone().0);
        };
        if let Some(offset) = utc_offset(name) {
            return Some(offset);
        }
        let (offset, local) = self.local_zone();
        match local {
            Some(local) if local.eq_ignore_ascii_case(name) => Some(*offset),
            _ => None,
        }
    }
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// A calendar day without a time: (month, day, year if given).
type MonthDay = (u32, u32, Option<i32>);

/// `Sep 24`, `Aug 8th, 2026`, `September 24`: the day, rest.
fn parse_month_day(s: &str) -> Option<(MonthDay, &str)> {
    let word_len = s.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
    if word_len < 3 {
        return None;
    }
    let word = s[..word_len].to_ascii_lowercase();
    let month = MONTHS.iter().position(|m| word.starts_with(m))? as u32 + 1;
    let mut rest = s[word_len..].strip_prefix('.').unwrap_or(&s[word_len..]);
    rest = rest.trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 2 {
        return None;
    }
    let day: u32 = rest[..digits].parse().ok()?;
    rest = &rest[digits..];
    for suffix in ["st", "nd", "rd", "th"] {
        if let Some(r) = strip_prefix_ci(rest, suffix) {
            rest = r;
            break;
        }
    }
    if rest.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return None;
    }
    let after = rest.trim_start_matches([',', ' ']);
    let year_digits = after.bytes().take_while(u8::is_ascii_digit).count();
    let mut year = None;
    if year_digits == 4 && !after[4..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == ':')
    {
        year = after[..4].parse().ok();
        rest = &after[4..];
    }
    Some(((month, day, year), rest))
}

/// `12:43pm`, `5pm`, `3:28 PM`, `17:00`: the time of day, rest.
fn parse_clock(s: &str) -> Option<(NaiveTime, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 2 {
        return None;
    }
    let hour: u32 = s[..digits].parse().ok()?;
    let mut rest = &s[digits..];
    let mut minute = None;
    let mut second = 0;
    if let Some(r) = rest.strip_prefix(':') {
        let m = r.bytes().take_while(u8::is_ascii_digit).count();
        if m != 2 {
            return None;
        }
        minute = Some(r[..2].parse::<u32>().ok()?);
        rest = &r[2..];
        // Seconds, if any: a reset a few seconds away is waited for to the second.
        if let Some(r) = rest.strip_prefix(':')
            && r.bytes().take_while(u8::is_ascii_digit).count() == 2
        {
            second = r[..2].parse::<u32>().ok()?;
            rest = &r[2..];
        }
    }
    let spaced = rest.trim_start();
    let mut meridiem = None;
    for (token, pm) in [("a.m.", false), ("p.m.", true), ("am", false), ("pm", true)] {
        if let Some(r) = strip_prefix_ci(spaced, token)
            && !r.starts_with(|c: char| c.is_ascii_alphanumeric())
        {
            meridiem = Some(pm);
            rest = r;
            break;
        }
    }
    let hour = match meridiem {
        Some(pm) => {
            if !(1..=12).contains(&hour) {
                return None;
            }
            (hour % 12) + if pm { 12 } else { 0 }
        }
        None => {
            minute?;
            hour
        }
    };
    if rest.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some((
        NaiveTime::from_hms_opt(hour, minute.unwrap_or(0), second)?,
        rest,
    ))
}

/// `3 days 6 hours 57 minutes`, `47 minutes`, `1h 30m`: seconds (at most 60 days).
fn parse_duration(s: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = s;
    let mut parts = 0;
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if let Some(r) = strip_prefix_ci(rest, "and ") {
            rest = r.trim_start();
        }
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 6 {
            break;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        let after = rest[digits..].trim_start();
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = after[..unit_len].to_ascii_lowercase();
        let scale = match unit.as_str() {
            "d" | "day" | "days" => 86_400,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            _ => break,
        };
        total = total.saturating_add(n.saturating_mul(scale));
        parts += 1;
        rest = &after[unit_len..];
    }
    (parts > 0 && total > 0).then_some(total.min(60 * 86_400))
}

/// A zone after a time: `(UTC)`, `(Europe/Berlin)`, or a bare `UTC`/`GMT+2`.
fn zone_name(rest: &str) -> Option<&str> {
    let rest = rest.trim_start();
    if let Some(inner) = rest.strip_prefix('(') {
        let end = inner.find(')')?;
        let name = inner[..end].trim();
        return (!name.is_empty()).then_some(name);
    }
    let len = rest
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b':' | b'/' | b'_'))
        .count();
    let word = &rest[..len];
    utc_offset(word).map(|_| word)
}

/// `UTC`, `GMT`, `Z`, `Etc/UTC`, `UTC+2`, `GMT-05:00`.
fn utc_offset(name: &str) -> Option<FixedOffset> {
    let upper = name.trim().to_ascii_uppercase();
    let upper = upper.strip_prefix("ETC/").unwrap_or(&upper);
    if matches!(upper, "UTC" | "GMT" | "Z" | "ZULU" | "UNIVERSAL" | "UCT") {
        return FixedOffset::east_opt(0);
    }
    let rest = upper
        .strip_prefix("UTC")
        .or_else(|| upper.strip_prefix("GMT"))?;
    let (sign, rest) = match rest.as_bytes().first()? {
        b'+' => (1, &rest[1..]),
        b'-' => (-1, &rest[1..]),
        _ => return None,
    };
    let (h, m) = match rest.split_once(':') {
        Some((h, m)) => (h.parse::<i32>().ok()?, m.parse::<i32>().ok()?),
        None if rest.len() == 4 => (rest.get(..2)?.parse().ok()?, rest.get(2..)?.parse().ok()?),
        None => (rest.parse().ok()?, 0),
    };
    if h > 14 || m > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60))
}

/// The machine's IANA zone name, for matching `resets 5pm (Europe/Berlin)`.
fn detect_zone_name() -> Option<String> {
    if let Ok(tz) = std::env::var("TZ") {
        let tz = tz.trim().trim_start_matches(':');
        if !tz.is_empty() {
            let tz = tz.rsplit_once("zoneinfo/").map_or(tz, |(_, z)| z);
            return Some(tz.to_owned());
        }
    }
    if let Ok(name) = std::fs::read_to_string("/etc/timezone") {
        let name = name.trim();
        if !name.is_empty() && name.len() < 64 {
            return Some(name.to_owned());
        }
    }
    let link = std::fs::read_link("/etc/localtime").ok()?;
    let link = link.to_string_lossy();
    link.rsplit_once("zoneinfo/").map(|(_, z)| z.to_owned())
}

/// The next instant after `now` matching the date and/or time in `offset`.
fn instant(
    date: Option<MonthDay>,
    time: Option<NaiveTime>,
    offset: FixedOffset,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let local_now = now.with_timezone(&offset);
    let time = time.unwrap_or(NaiveTime::MIN);
    let at = |d: NaiveDate| {
        offset
            .from_local_datetime(&d.and_time(time))
            .single()
            .map(|t| t.with_timezone(&Utc))
    };
    match date {
        None => {
            let today = at(local_now.date_naive())?;
            if today > now {
                Some(today)
            } else if now - today < chrono::TimeDelta::minutes(2) {
                // Times of day are printed to the minute: one just past means "about now",
                // not tomorrow.
                Some(now)
            } else {
                at(local_now.date_naive().succ_opt()?)
            }
        }
        Some((month, day, Some(year))) => {
            at(NaiveDate::from_ymd_opt(year, month, day)?).filter(|t| *t > now)
        }
        Some((month, day, None)) => {
            let year = local_now.year();
            (year..=year + 1)
                .filter_map(|y| NaiveDate::from_ymd_opt(y, month, day).and_then(at))
                .find(|t| *t > now)
        }
    }
}

/// Epoch seconds (or milliseconds) from a JSON value.
pub(crate) fn epoch(v: &Value) -> Option<DateTime<Utc>> {
    let n = as_f64(v)?;
    let secs = if n > 1e11 { n / 1000.0 } else { n };
    if !(0.0..=1e11).contains(&secs) {
        return None;
    }
    DateTime::from_timestamp(secs as i64, 0)
}

/// Epoch seconds at the start of a text (`1790164200`, ` "1790164200"`).
fn epoch_prefix(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim_start().trim_start_matches('"');
    let n = leading_u64(s)?;
    epoch(&Value::from(n))
}

fn leading_u64(s: &str) -> Option<u64> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 15 {
        return None;
    }
    s[..digits].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn utc_now() -> DateTime<Utc> {
        at("2026-03-10T09:00:00Z")
    }

    fn reset(clock: Clock, text: &str) -> Option<DateTime<Utc>> {
        let mut clock = clock;
        clock.parse_reset(text, &text.to_ascii_lowercase())
    }

    fn utc(now: DateTime<Utc>) -> Clock {
        Clock::new(now).with_local_zone(FixedOffset::east_opt(0).unwrap(), Some("Etc/UTC"))
    }

    #[test]
    fn json_fields_and_epochs() {
        let t = Utc.timestamp_opt(1773158400, 0).unwrap();
        assert_eq!(
            reset(utc(utc_now()), r#"{"resets_at":1773158400}"#),
            Some(t)
        );
        assert_eq!(
            reset(utc(utc_now()), r#"\"resets_at\":1773158400"#),
            Some(t)
        );
        assert_eq!(
            reset(utc(utc_now()), r#""resets_in_seconds": 90"#),
            Some(at("2026-03-10T09:01:30Z"))
        );
        assert_eq!(reset(utc(utc_now()), "it resets_at noon"), None);
        assert_eq!(
            reset(utc(utc_now()), "Claude AI usage limit reached|1790164200"),
            Some(at("2026-09-23T11:50:00Z"))
        );
        assert_eq!(epoch(&Value::from(1_773_158_400_000u64)), Some(t));
    }

    #[test]
    fn a_time_of_day_rolls_over_to_the_next_day() {
        let text = "You've hit your session limit · resets 12:43pm (UTC)";
        assert_eq!(
            reset(utc(at("2026-03-10T09:00:00Z")), text),
            Some(at("2026-03-10T12:43:00Z"))
        );
        assert_eq!(
            reset(utc(at("2026-03-10T20:15:00Z")), text),
            Some(at("2026-03-11T12:43:00Z"))
        );
        // Across a month end, a few minutes past the time → the next day.
        assert_eq!(
            reset(utc(at("2026-03-31T12:46:00Z")), text),
            Some(at("2026-04-01T12:43:00Z"))
        );
        // Just past (printed to the minute): about now, not tomorrow.
        assert_eq!(
            reset(utc(at("2026-03-10T12:43:30Z")), text),
            Some(at("2026-03-10T12:43:30Z"))
        );
    }

    #[test]
    fn reset_times_in_named_zones() {
        let berlin = FixedOffset::east_opt(3600).unwrap();
        let clock = |name| Clock::new(utc_now()).with_local_zone(berlin, name);
        // The local zone, by name or without one.
        let t = reset(clock(Some("Europe/Berlin")), "resets 3pm (Europe/Berlin)");
        assert_eq!(t, Some(at("2026-03-10T14:00:00Z")));
        let t = reset(clock(Some("Europe/Berlin")), "resets 3pm");
        assert_eq!(t, Some(at("2026-03-10T14:00:00Z")));
        // An explicit offset.
        let t = reset(clock(None), "resets 3pm (UTC+2)");
        assert_eq!(t, Some(at("2026-03-10T13:00:00Z")));
        // Another named zone cannot be resolved.
        let t = reset(
            clock(Some("Europe/Berlin")),
            "resets 2:50am (America/Sao_Paulo)",
        );
        assert_eq!(t, None);
    }

    #[test]
    fn time_parsers() {
        let t = |h, m| NaiveTime::from_hms_opt(h, m, 0).unwrap();
        assert_eq!(parse_clock("12:43pm (UTC)").map(|x| x.0), Some(t(12, 43)));
        assert_eq!(parse_clock("12am").map(|x| x.0), Some(t(0, 0)));
        assert_eq!(parse_clock("3:28 PM.").map(|x| x.0), Some(t(15, 28)));
        assert_eq!(parse_clock("17:05").map(|x| x.0), Some(t(17, 5)));
        // Seconds are kept: a reset seconds away is not read as the minute before it.
        assert_eq!(
            parse_clock("10:41:53 UTC").map(|x| x.0),
            NaiveTime::from_hms_opt(10, 41, 53)
        );
        assert_eq!(parse_clock("10:41:99"), None);
        assert_eq!(parse_clock("5 apples"), None);
        assert_eq!(parse_clock("13pm"), None);
        assert_eq!(parse_clock("25:00"), None);
        assert_eq!(parse_duration("47 minutes"), Some(47 * 60));
        assert_eq!(parse_duration("1h 30m"), Some(5400));
        assert_eq!(parse_duration("2 hours and 5 minutes"), Some(7500));
        assert_eq!(parse_duration("soon"), None);
        assert_eq!(
            parse_month_day("Sep 24, 5pm").map(|x| x.0),
            Some((9, 24, None))
        );
        assert_eq!(
            parse_month_day("Aug 8th, 2026 12:30 PM").map(|x| x.0),
            Some((8, 8, Some(2026)))
        );
        assert_eq!(parse_month_day("Soon"), None);
        assert_eq!(utc_offset("GMT-05:00"), FixedOffset::west_opt(5 * 3600));
        assert_eq!(
            utc_offset("UTC+0530"),
            FixedOffset::east_opt(5 * 3600 + 30 * 60)
        );
        assert_eq!(utc_offset("Europe/Paris"), None);
        // Date without a year in the past → next year; with a past year → unknown.
        let o = FixedOffset::east_opt(0).unwrap();
        assert_eq!(
            instant(Some((1, 5, None)), None, o, utc_now()),
            Some(at("2027-01-05T00:00:00Z"))
        );
        assert_eq!(instant(Some((1, 5, Some(2020))), None, o, utc_now()), None);
        assert_eq!(instant(Some((2, 30, None)), None, o, utc_now()), None);
    }

    proptest! {
        #[test]
        fn when_parser_never_panics(s in "\\PC{0,30}", digits in "[0-9: ,apmAPM()/a-zA-Z+\\-]{0,30}") {
            let mut clock = utc(utc_now());
            let _ = clock.parse_when(&s);
            let _ = clock.parse_when(&digits);
            let _ = parse_duration(&digits);
            let _ = utc_offset(&s);
            let lower = digits.to_ascii_lowercase();
            let _ = clock.parse_reset(&digits, &lower);
        }
    }
}
