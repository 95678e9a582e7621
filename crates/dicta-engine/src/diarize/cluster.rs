//! Agglomerative clustering of speaker embeddings: average linkage on cosine distance, built with
//! the nearest-neighbour chain (O(n²) time and memory), then cut either at a given number of
//! clusters or where the next merge would join clusters farther apart than a threshold.

/// The merges of a full dendrogram, ascending by distance: `(a, b, distance)` over point indices
/// (each merge joins the clusters holding `a` and `b`).
#[derive(Debug, Clone)]
pub struct Dendrogram {
    n: usize,
    merges: Vec<(usize, usize, f32)>,
}

impl Dendrogram {
    /// Builds the dendrogram of L2-normalised points (`points[i]` of equal length).
    pub fn build(points: &[Vec<f32>]) -> Self {
        let n = points.len();
        // Condensed full matrix of distances (1 − cosine), f32.
        let mut d = vec![0f32; n * n];
        for i in 0..n {
            for j in i + 1..n {
                let s: f32 = points[i].iter().zip(&points[j]).map(|(a, b)| a * b).sum();
                d[i * n + j] = 1.0 - s;
                d[j * n + i] = 1.0 - s;
            }
        }
        let mut size = vec![1usize; n];
        let mut active = vec![true; n];
        let mut merges = Vec::with_capacity(n.saturating_sub(1));
        let mut chain: Vec<usize> = Vec::new();
        let mut remaining = n;
        while remaining > 1 {
            if chain.is_empty() {
                chain.push(active.iter().position(|&a| a).expect("an active cluster"));
            }
            let top = *chain.last().expect("non-empty chain");
            let prev = chain.len().checked_sub(2).map(|i| chain[i]);
            // Nearest active neighbour; the previous chain element wins ties (guarantees
            // termination).
            let mut best = prev.unwrap_or(usize::MAX);
            let mut best_d = prev.map_or(f32::INFINITY, |p| d[top * n + p]);
            for k in 0..n {
                if k != top && active[k] && d[top * n + k] < best_d {
                    best = k;
                    best_d = d[top * n + k];
                }
            }
            if Some(best) == prev {
                chain.pop();
                chain.pop();
                let (a, b) = (top.min(best), top.max(best));
                merges.push((a, b, best_d));
                // Lance–Williams update for average linkage, into slot `a`.
                let (na, nb) = (size[a] as f32, size[b] as f32);
                for k in 0..n {
                    if active[k] && k != a && k != b {
                        let v = (na * d[a * n + k] + nb * d[b * n + k]) / (na + nb);
                        d[a * n + k] = v;
                        d[k * n + a] = v;
                    }
                }
                size[a] += size[b];
                active[b] = false;
                remaining -= 1;
            } else {
                chain.push(best);
            }
        }
        // Average linkage is reducible: sorting the chain's merges gives the same dendrogram.
        merges.sort_by(|x, y| x.2.total_cmp(&y.2));
        Self { n, merges }
    }

    /// Distances of the last `k` merges, last first (the dendrogram's top heights).
    pub fn top_heights(&self, k: usize) -> Vec<f32> {
        self.merges.iter().rev().take(k).map(|m| m.2).collect()
    }

    /// Number of clusters left when every merge at distance ≤ `threshold` is made.
    pub fn clusters_below(&self, threshold: f32) -> usize {
        self.n - self.merges.iter().filter(|m| m.2 <= threshold).count()
    }

    /// Labels `0..k` (numbered by first appearance) with `k` clusters (clamped to `1..=n`).
    pub fn labels(&self, k: usize) -> Vec<usize> {
        let k = k.clamp(1.min(self.n), self.n);
        let mut parent: Vec<usize> = (0..self.n).collect();
        fn find(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        }
        for &(a, b, _) in self.merges.iter().take(self.n - k) {
            let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
            parent[rb] = ra;
        }
        let mut ids = std::collections::HashMap::new();
        (0..self.n)
            .map(|i| {
                let r = find(&mut parent, i);
                let next = ids.len();
                *ids.entry(r).or_insert(next)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn separates_clear_groups_and_honours_a_count() {
        let pts: Vec<Vec<f32>> = [
            [1.0, 0.1, 0.0],
            [0.0, 1.0, 0.1],
            [0.95, 0.15, 0.0],
            [0.1, 0.9, 0.0],
            [0.0, 0.0, 1.0],
            [1.0, 0.0, 0.05],
        ]
        .iter()
        .map(|p| unit(p))
        .collect();
        let d = Dendrogram::build(&pts);
        assert_eq!(d.clusters_below(0.3), 3);
        assert_eq!(d.labels(3), vec![0, 1, 0, 1, 2, 0]);
        assert_eq!(d.labels(1), vec![0; 6]);
        assert_eq!(d.labels(6), vec![0, 1, 2, 3, 4, 5]);
        // Merges ascend.
        assert!(d.merges.windows(2).all(|w| w[0].2 <= w[1].2));
    }

    #[test]
    fn one_point_and_none() {
        let d = Dendrogram::build(&[unit(&[1.0, 2.0])]);
        assert_eq!(d.labels(3), vec![0]);
        assert_eq!(Dendrogram::build(&[]).labels(2), Vec::<usize>::new());
    }
}
