//! Scalar helpers shared by the hand-written layers of several model families (Silero VAD,
//! ECAPA-TDNN).

/// The source index of position `i` of a sequence of `n` reflect-padded on both sides (the edge
/// element not repeated), as ONNX `Pad(mode="reflect")` and torch `F.pad(mode="reflect")`
/// index it. `i` may lie up to `n − 1` beyond either end.
pub(crate) fn reflect(i: isize, n: usize) -> usize {
    let n = n as isize;
    let i = if i < 0 { -i } else { i };
    (if i >= n { 2 * (n - 1) - i } else { i }) as usize
}

/// The logistic function.
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_matches_onnx_pad() {
        // ONNX reflect of [0,1,2,3] by 2: [2,1,0,1,2,3,2,1].
        let got: Vec<usize> = (-2..6).map(|i| reflect(i, 4)).collect();
        assert_eq!(got, vec![2, 1, 0, 1, 2, 3, 2, 1]);
    }
}
