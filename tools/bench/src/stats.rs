//! Percentiles of a sample, by the nearest-rank method: every figure reported is one that was
//! measured, never an interpolation. With 50 samples the p99 is the maximum.

use std::time::Duration;

use serde::Serialize;

/// A sample summarised, in milliseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// How many values.
    pub n: usize,
    /// The smallest.
    pub min_ms: f64,
    /// The median (nearest rank).
    pub p50_ms: f64,
    /// The 90th percentile (nearest rank).
    pub p90_ms: f64,
    /// The 99th percentile (nearest rank).
    pub p99_ms: f64,
    /// The largest.
    pub max_ms: f64,
    /// The arithmetic mean.
    pub mean_ms: f64,
}

impl Summary {
    /// Summarises `durations`; `None` when there are none.
    pub fn of(durations: &[Duration]) -> Option<Summary> {
        let mut ms: Vec<f64> = durations.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let (first, last) = (*ms.first()?, *ms.last()?);
        Some(Summary {
            n: ms.len(),
            min_ms: first,
            p50_ms: percentile(&ms, 50.0),
            p90_ms: percentile(&ms, 90.0),
            p99_ms: percentile(&ms, 99.0),
            max_ms: last,
            mean_ms: ms.iter().sum::<f64>() / ms.len() as f64,
        })
    }
}

/// The nearest-rank `p`th percentile of `sorted` (ascending, not empty).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let ms =
            |v: &[u64]| -> Vec<Duration> { v.iter().map(|&m| Duration::from_millis(m)).collect() };
        let one = Summary::of(&ms(&[7])).expect("one value");
        assert_eq!(
            (one.min_ms, one.p50_ms, one.p99_ms, one.max_ms),
            (7.0, 7.0, 7.0, 7.0)
        );
        let hundred: Vec<u64> = (1..=100).rev().collect();
        let s = Summary::of(&ms(&hundred)).expect("values");
        assert_eq!((s.p50_ms, s.p90_ms, s.p99_ms), (50.0, 90.0, 99.0));
        let fifty: Vec<u64> = (1..=50).collect();
        let s = Summary::of(&ms(&fifty)).expect("values");
        assert_eq!((s.p50_ms, s.p90_ms, s.p99_ms), (25.0, 45.0, 50.0));
        assert!(Summary::of(&[]).is_none());
    }
}
