//! Percentiles and the per-scenario figures, in the shape the Python suite records (`bench.stats`): samples,
//! p50/p95/p99 milliseconds and operations per second.

use serde_json::{json, Value};

/// The q-th percentile of `xs` with linear interpolation between the closest ranks (numpy's default), so that
/// the native figures are computed the way the Python suite computes its own. NaN for no samples.
pub fn pct(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    pct_sorted(&v, q)
}

fn pct_sorted(v: &[f64], q: f64) -> f64 {
    let pos = q / 100.0 * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// `{samples, p50_ms, p95_ms, p99_ms, ops_s}` of latencies in milliseconds; ops/s over `elapsed` seconds (or,
/// without it, over the sum of the latencies, as for one sequential client).
pub fn stats(lat_ms: &[f64], elapsed: Option<f64>) -> Value {
    let mut v = lat_ms.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    let tot = elapsed.unwrap_or_else(|| v.iter().sum::<f64>() / 1000.0);
    let p = |q| if n == 0 { Value::Null } else { json!(pct_sorted(&v, q)) };
    json!({
        "samples": n,
        "p50_ms": p(50.0),
        "p95_ms": p(95.0),
        "p99_ms": p(99.0),
        "ops_s": if tot > 0.0 { json!(n as f64 / tot) } else { Value::Null },
    })
}

/// Operations completed in each whole second of a run (by end time, seconds since its start), then their
/// p1/p50/p99, min and max: the SlateDB report's per-second throughput, as `bench.update_heavy` computes it.
pub fn per_second(end_times: &[f64], elapsed: f64) -> Value {
    let secs = (elapsed as usize).max(1);
    let mut buckets = vec![0f64; secs + 1];
    for &t in end_times {
        let b = t.max(0.0) as usize;
        if b <= secs {
            buckets[b] += 1.0;
        }
    }
    let ps = &buckets[..secs];
    json!({
        "p1": pct(ps, 1.0),
        "p50": pct(ps, 50.0),
        "p99": pct(ps, 99.0),
        "min": ps.iter().cloned().fold(f64::INFINITY, f64::min),
        "max": ps.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        "seconds": secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(pct(&xs, 50.0), 2.5);
        assert!((pct(&xs, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(pct(&[5.0], 1.0), 5.0);
        assert!(pct(&[], 50.0).is_nan());
    }

    #[test]
    fn per_second_buckets_whole_seconds() {
        let v = per_second(&[0.1, 0.2, 1.5, 2.9, 3.0], 3.2);
        assert_eq!(v["seconds"], 3);
        assert_eq!(v["min"], 1.0);
        assert_eq!(v["max"], 2.0);
    }
}
