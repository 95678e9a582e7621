//! The iteration order of pyctcdecode's per-frame token set,
//! `set(np.where(col >= token_min_logp)[0]) | {argmax}`, reproduced from CPython 3.11's
//! `setobject.c` (open addressing, linear probes, perturbation, resize rules).
//!
//! Why: quantised or peaked log-probs make exactly equal beam scores common, and pyctcdecode
//! breaks such ties by candidate order, which follows this set's table order. Emulating it is
//! what makes the decoders agree on tied beams instead of picking an equal-scoring neighbour.

const MIN_SIZE: usize = 8;
const LINEAR_PROBES: usize = 9;
const PERTURB_SHIFT: u32 = 5;

/// A CPython set of small non-negative ints (hash(k) == k), no deletions.
#[derive(Debug, Clone)]
pub(crate) struct PySet {
    table: Vec<u32>,
    fill: usize,
}

const EMPTY: u32 = u32::MAX;

impl PySet {
    pub(crate) fn new() -> Self {
        Self {
            table: vec![EMPTY; MIN_SIZE],
            fill: 0,
        }
    }

    fn mask(&self) -> usize {
        self.table.len() - 1
    }

    /// Clears and refills with `items` inserted in order (as `set(iterable)`).
    pub(crate) fn assign(&mut self, items: impl Iterator<Item = u32>) {
        self.table.clear();
        self.table.resize(MIN_SIZE, EMPTY);
        self.fill = 0;
        for k in items {
            self.add(k);
        }
    }

    /// `set_add_entry`.
    pub(crate) fn add(&mut self, key: u32) {
        let mask = self.mask();
        let mut i = key as usize & mask;
        let mut perturb = key as usize;
        loop {
            let probes = if i + LINEAR_PROBES <= mask {
                LINEAR_PROBES
            } else {
                0
            };
            for j in i..=i + probes {
                let e = self.table[j];
                if e == key {
                    return;
                }
                if e == EMPTY {
                    self.table[j] = key;
                    self.fill += 1;
                    if self.fill * 5 >= mask * 3 {
                        self.resize(self.fill * 4);
                    }
                    return;
                }
            }
            perturb >>= PERTURB_SHIFT;
            i = (i * 5 + 1 + perturb) & mask;
        }
    }

    /// `set_table_resize`: re-inserts entries in table order into a table larger than `minused`.
    fn resize(&mut self, minused: usize) {
        let mut size = MIN_SIZE;
        while size <= minused {
            size <<= 1;
        }
        let old = std::mem::replace(&mut self.table, vec![EMPTY; size]);
        for k in old.into_iter().filter(|&k| k != EMPTY) {
            self.insert_clean(k);
        }
    }

    /// `set_insert_clean`.
    fn insert_clean(&mut self, key: u32) {
        let mask = self.mask();
        let mut i = key as usize & mask;
        let mut perturb = key as usize;
        loop {
            let probes = if i + LINEAR_PROBES <= mask {
                LINEAR_PROBES
            } else {
                0
            };
            for j in i..=i + probes {
                if self.table[j] == EMPTY {
                    self.table[j] = key;
                    return;
                }
            }
            perturb >>= PERTURB_SHIFT;
            i = (i * 5 + 1 + perturb) & mask;
        }
    }

    /// `self | {key}`: a copy (`set_merge` into an empty set) plus one insertion.
    pub(crate) fn union_one(&self, key: u32, out: &mut PySet) {
        out.table.clear();
        out.table.resize(MIN_SIZE, EMPTY);
        out.fill = 0;
        if self.fill > 0 {
            if self.fill * 5 >= out.mask() * 3 {
                out.resize(self.fill * 2);
            }
            if out.table.len() == self.table.len() {
                out.table.copy_from_slice(&self.table);
            } else {
                for &k in self.table.iter().filter(|&&k| k != EMPTY) {
                    out.insert_clean(k);
                }
            }
            out.fill = self.fill;
        }
        // set_merge with the one-element set: resize check first, then a normal insertion.
        if (out.fill + 1) * 5 >= out.mask() * 3 {
            out.resize((out.fill + 1) * 2);
        }
        out.add(key);
    }

    /// Keys in iteration (table) order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.table.iter().copied().filter(|&k| k != EMPTY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(items: &[u32], max: u32) -> Vec<u32> {
        let mut s = PySet::new();
        s.assign(items.iter().copied());
        let mut out = PySet::new();
        s.union_one(max, &mut out);
        out.iter().collect()
    }

    /// Expected orders printed by CPython 3.11:
    /// `list(set(np.array(items, dtype=np.int64)) | {np.int64(m)})`.
    #[test]
    fn matches_cpython_iteration_order() {
        assert_eq!(order(&[0, 17, 9, 3], 9), vec![0, 17, 3, 9]);
        assert_eq!(
            order(&(0..29).collect::<Vec<_>>(), 5),
            (0..29).collect::<Vec<_>>()
        );
        assert_eq!(order(&[8, 16, 24], 0), vec![8, 16, 24, 0]);
        assert_eq!(order(&[5, 13, 21, 29, 37], 40), vec![29, 37, 5, 21, 40, 13]);
        let items: Vec<u32> = (0..19).map(|i| 1 + 8 * i).collect();
        assert_eq!(
            order(&items, 3),
            vec![1, 129, 65, 3, 9, 137, 73, 17, 145, 81, 25, 89, 33, 97, 121, 41, 105, 49, 113, 57]
        );
        let items: Vec<u32> = (0..300).step_by(7).collect();
        assert_eq!(
            order(&items, 300),
            vec![
                0, 259, 133, 7, 266, 140, 14, 273, 147, 21, 280, 154, 28, 287, 161, 35, 294, 168,
                42, 300, 175, 49, 182, 56, 189, 63, 196, 70, 203, 77, 210, 84, 217, 91, 224, 98,
                231, 105, 238, 112, 245, 119, 252, 126
            ]
        );
    }
}
