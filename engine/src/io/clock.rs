//! The host's clock as files and templates write it: seconds since the Unix epoch, and the
//! civil (proleptic Gregorian) date of a day count.

/// Seconds since 1970-01-01 UTC (0 if the clock is before it).
pub(crate) fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The civil date (year, month 1..=12, day) of a day count since 1970-01-01 (Howard Hinnant's
/// days-to-civil algorithm).
pub fn civil(days: i64) -> (i64, usize, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month as usize, day)
}

#[cfg(test)]
mod tests {
    #[test]
    fn day_counts_become_civil_dates() {
        assert_eq!(super::civil(0), (1970, 1, 1));
        assert_eq!(super::civil(-1), (1969, 12, 31));
        assert_eq!(super::civil(19_927), (2024, 7, 23));
    }
}
