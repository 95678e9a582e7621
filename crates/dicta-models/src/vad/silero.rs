//! Silero VAD v6 (16 kHz), from the ONNX file that faster-whisper ships
//! (`faster_whisper/assets/silero_vad_v6.onnx`) or any export with the same graph.
//!
//! The network, per 576-sample input (a 512-sample window after 64 samples of context):
//! 1. STFT as a strided conv: reflect-pad 128 each side (832 samples), 5 frames of 256 samples
//!    at hop 128 against a fixed `[258, 256]` basis (129 real + 129 imaginary rows); the first
//!    frame is dropped and the magnitude `sqrt(re² + im²)` kept → `[4, 129]`.
//! 2. Four convs (kernel 3, padding 1, strides 1, 2, 2, 1) with ReLU: 129 → 128 → 64 → 64 → 128
//!    channels, 4 → 4 → 2 → 1 → 1 frames.
//! 3. One LSTM cell (hidden 128) that runs *across windows*: the export feeds a batch of windows
//!    as the LSTM's sequence axis, so window `i` sees the state left by window `i − 1`.
//! 4. ReLU, a 128 → 1 projection and a sigmoid: the speech probability of the window.
//!
//! Steps 1–2 are independent per window and run as batched matmuls over many windows, in
//! parallel parts; step 3 is the only sequential part (a 512×128 mat-vec per window,
//! [`crate::kernels::lstm`]), and over a whole recording it runs through one block of windows
//! while the next block is encoded.

use candle_core::{Device, Tensor};
use dicta_core::{Error, Result};

use crate::kernels::lstm;
use crate::layers::{reflect, sigmoid};
use crate::ort::{transpose, OrtModel};

/// Samples per window (at 16 kHz).
pub const WINDOW: usize = 512;
/// Samples of the previous window prepended to each window.
pub const CONTEXT: usize = 64;
/// Samples per model input row (`CONTEXT + WINDOW`).
pub const INPUT: usize = CONTEXT + WINDOW;
/// LSTM width.
pub const HIDDEN: usize = 128;

const N_FFT: usize = 256;
const HOP: usize = 128;
const PAD: usize = 128;
const FREQS: usize = N_FFT / 2 + 1;
/// STFT frames per input after the first is dropped.
const FRAMES: usize = (INPUT + 2 * PAD - N_FFT) / HOP;
/// Windows per parallel part of a block's encoder pass.
const PART: usize = 256;
/// Windows per batched encoder pass (bounds the intermediate buffers, ≈ 8 MB per 1000).
const BLOCK: usize = 2048;

/// The recurrent state carried from one window to the next (`h`, `c` of the LSTM).
#[derive(Debug, Clone)]
pub struct SileroState {
    /// Hidden state `[128]`.
    pub h: Vec<f32>,
    /// Cell state `[128]`.
    pub c: Vec<f32>,
}

impl Default for SileroState {
    fn default() -> Self {
        Self {
            h: vec![0.0; HIDDEN],
            c: vec![0.0; HIDDEN],
        }
    }
}

/// Model input rows `[n, 576]` of `windows` (`n` whole 512-sample windows): each window after
/// the 64 samples before it, `context` for the first; `context` is left holding the last
/// window's last 64 samples, the next row's context.
pub fn rows_with_context(context: &mut [f32; CONTEXT], windows: &[f32]) -> Vec<f32> {
    let mut rows = Vec::with_capacity(windows.len() / WINDOW * INPUT);
    for w in windows.chunks_exact(WINDOW) {
        rows.extend_from_slice(context);
        rows.extend_from_slice(w);
        context.copy_from_slice(&w[WINDOW - CONTEXT..]);
    }
    rows
}

/// A conv layer as a matmul: weights `[c_in·k, c_out]` (im2col order), bias `[c_out]`.
struct Conv {
    w: Tensor,
    b: Vec<f32>,
    c_in: usize,
    c_out: usize,
    stride: usize,
}

/// Silero VAD weights, immutable and shareable; per-stream state is a [`SileroState`].
pub struct SileroVad {
    /// STFT basis, transposed: `[256, 258]`.
    basis: Tensor,
    convs: Vec<Conv>,
    /// LSTM input weights, transposed `[128, 512]` (gates i, o, f, c as ONNX orders them).
    w_ih: Tensor,
    /// LSTM recurrent weights, transposed `[128, 512]` (see [`crate::kernels::lstm::step`]).
    w_hh_t: Vec<f32>,
    /// Both LSTM biases summed `[512]`.
    bias: Vec<f32>,
    /// Output projection `[128]` and bias.
    out_w: Vec<f32>,
    out_b: f32,
}

impl SileroVad {
    /// Loads the network from an `.onnx` (or `.ort`) file. Errors (`ModelLoad`) name what is
    /// missing.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let m = OrtModel::read(path)?;
        Self::from_model(&m).map_err(|e| e.context(path.display()))
    }

    /// Builds the network from a parsed graph: the STFT basis and convs by their module names,
    /// the LSTM through the node that consumes its (anonymous) weights. The first graph that
    /// holds them all is used (v6 has one graph; v5 exports nest a 16 kHz branch in an `If`).
    pub fn from_model(m: &OrtModel) -> Result<Self> {
        let mut last = Error::model_load("Silero VAD: no graph with the STFT basis and an LSTM");
        for g in 0..m.graphs.len() {
            match Self::from_graph(m, g) {
                Ok(v) => return Ok(v),
                Err(e) if g == 0 => last = e,
                Err(_) => {}
            }
        }
        Err(last)
    }

    fn from_graph(m: &OrtModel, g: usize) -> Result<Self> {
        let get = |name: &str, dims: &[usize]| -> Result<Vec<f32>> {
            let t = m
                .initializer(g, name)
                .ok_or_else(|| Error::model_load(format!("Silero VAD: {name} missing")))?;
            if t.dims != dims {
                return Err(Error::model_load(format!(
                    "Silero VAD: {name} has shape {:?}, expected {dims:?}",
                    t.dims
                )));
            }
            t.to_f32()
        };
        let cpu = &Device::Cpu;
        let tensor = |v: Vec<f32>, k: usize, n: usize| {
            Tensor::from_vec(v, (k, n), cpu).map_err(|e| Error::model_load(e.to_string()))
        };
        let basis = get(
            "encoder.feature_extractor.forward_basis_buffer",
            &[2 * FREQS, 1, N_FFT],
        )?;
        let basis = tensor(transpose(&basis, 2 * FREQS, N_FFT), N_FFT, 2 * FREQS)?;
        let mut convs = Vec::new();
        for (i, (c_in, c_out, stride)) in [(FREQS, 128, 1), (128, 64, 2), (64, 64, 2), (64, 128, 1)]
            .into_iter()
            .enumerate()
        {
            let w = get(
                &format!("encoder.conv_layers.{i}.weight"),
                &[c_out, c_in, 3],
            )?;
            let b = get(&format!("encoder.conv_layers.{i}.bias"), &[c_out])?;
            convs.push(Conv {
                w: tensor(transpose(&w, c_out, c_in * 3), c_in * 3, c_out)?,
                b,
                c_in,
                c_out,
                stride,
            });
        }
        let lstm = m.graphs[g]
            .nodes
            .iter()
            .find(|n| n.op_type == "LSTM")
            .ok_or_else(|| Error::model_load("Silero VAD: no LSTM node"))?;
        if lstm.attr_int("hidden_size") != Some(HIDDEN as i64) {
            return Err(Error::model_load(format!(
                "Silero VAD: LSTM hidden_size {:?}, expected {HIDDEN}",
                lstm.attr_int("hidden_size")
            )));
        }
        let input = |i: usize| {
            lstm.input(i)
                .ok_or_else(|| Error::model_load(format!("Silero VAD: LSTM input {i} missing")))
        };
        let w = get(input(1)?, &[1, 4 * HIDDEN, HIDDEN])?;
        let w_hh = get(input(2)?, &[1, 4 * HIDDEN, HIDDEN])?;
        let b = get(input(3)?, &[1, 8 * HIDDEN])?;
        let bias = (0..4 * HIDDEN).map(|j| b[j] + b[4 * HIDDEN + j]).collect();
        let out_w = get("decoder.conv1d.weight", &[1, HIDDEN, 1])?;
        let out_b = get("decoder.conv1d.bias", &[1])?[0];
        Ok(Self {
            basis,
            convs,
            w_ih: tensor(transpose(&w, 4 * HIDDEN, HIDDEN), HIDDEN, 4 * HIDDEN)?,
            w_hh_t: transpose(&w_hh, 4 * HIDDEN, HIDDEN),
            bias,
            out_w,
            out_b,
        })
    }

    /// Speech probabilities of `n` input rows `inputs: [n, 576]` (each a 512-sample window
    /// after its 64 samples of context), carrying `state` across them and leaving it after the
    /// last row. Returns `[n]` probabilities.
    pub fn forward(&self, inputs: &[f32], state: &mut SileroState) -> Result<Vec<f32>> {
        if !inputs.len().is_multiple_of(INPUT) {
            return Err(Error::invalid_input(format!(
                "Silero VAD input of {} samples is not a whole number of {INPUT}-sample rows",
                inputs.len()
            )));
        }
        if state.h.len() != HIDDEN || state.c.len() != HIDDEN {
            return Err(Error::invalid_input(format!(
                "Silero VAD state must hold {HIDDEN} values in h and c, got {} and {}",
                state.h.len(),
                state.c.len()
            )));
        }
        let mut probs = Vec::with_capacity(inputs.len() / INPUT);
        for block in inputs.chunks(BLOCK * INPUT) {
            let gates_x = self.encode(block).map_err(candle_err)?;
            self.recur(&gates_x, state, &mut probs);
        }
        Ok(probs)
    }

    /// Speech probability of every 512-sample window of a whole 16 kHz recording, exactly as
    /// faster-whisper's `get_speech_timestamps` computes them: the audio is zero-padded by
    /// `512 − len % 512` samples (a whole window when the length is already a multiple), each
    /// window gets the last 64 samples of the one before (zeros for the first), and one state
    /// runs through all windows. Returns `[⌈(len + 1) / 512⌉]` probabilities.
    pub fn speech_probs(&self, audio: &[f32]) -> Result<Vec<f32>> {
        let n = audio.len() / WINDOW + 1;
        let mut padded = audio.to_vec();
        padded.resize(n * WINDOW, 0.0);
        // faster-whisper takes the contexts from a view of the padded audio and zeroes the
        // last row of that view in place before rolling it, so the final window's own last
        // 64 samples are zeros too; kept for identical probabilities.
        padded[n * WINDOW - CONTEXT..].fill(0.0);
        // Built a block at a time: a one-hour recording's rows would be ≈ 260 MB at once. The
        // next block is encoded (in parallel parts) while the LSTM runs through this one.
        let encode_block = |first: usize| -> Result<Vec<f32>> {
            let mut context = [0.0; CONTEXT];
            if first > 0 {
                context.copy_from_slice(&padded[first * WINDOW - CONTEXT..first * WINDOW]);
            }
            let windows = &padded[first * WINDOW..(first + BLOCK).min(n) * WINDOW];
            self.encode_par(&rows_with_context(&mut context, windows))
        };
        let mut state = SileroState::default();
        let mut probs = Vec::with_capacity(n);
        let mut next = Some(encode_block(0)?);
        for first in (0..n).step_by(BLOCK) {
            let gates_x = next.take().expect("the block was encoded");
            let (ahead, ()) = rayon::join(
                || (first + BLOCK < n).then(|| encode_block(first + BLOCK)),
                || self.recur(&gates_x, &mut state, &mut probs),
            );
            next = ahead.transpose()?;
        }
        Ok(probs)
    }

    /// [`SileroVad::encode`] in parts of [`PART`] rows on the thread pool (each row's values
    /// depend on that row alone).
    fn encode_par(&self, rows: &[f32]) -> Result<Vec<f32>> {
        use rayon::prelude::*;
        let parts: Vec<Vec<f32>> = rows
            .par_chunks(PART * INPUT)
            .map(|part| self.encode(part))
            .collect::<candle_core::Result<_>>()
            .map_err(candle_err)?;
        Ok(parts.concat())
    }

    /// Steps 1–2 and the LSTM's input projection for a block of rows: `[n, 576]` →
    /// `[n, 512]` input gate pre-activations (biases included).
    fn encode(&self, rows: &[f32]) -> candle_core::Result<Vec<f32>> {
        let n = rows.len() / INPUT;
        let cpu = &Device::Cpu;
        // STFT frames, reflect-padded: [n·FRAMES, 256] (the dropped first frame is not built).
        let mut frames = vec![0f32; n * FRAMES * N_FFT];
        let mut padded = [0f32; INPUT + 2 * PAD];
        for (r, row) in rows.chunks_exact(INPUT).enumerate() {
            for (j, p) in padded.iter_mut().enumerate() {
                *p = row[reflect(j as isize - PAD as isize, INPUT)];
            }
            for f in 0..FRAMES {
                let start = (f + 1) * HOP;
                frames[(r * FRAMES + f) * N_FFT..][..N_FFT]
                    .copy_from_slice(&padded[start..start + N_FFT]);
            }
        }
        let spec = Tensor::from_vec(frames, (n * FRAMES, N_FFT), cpu)?.matmul(&self.basis)?;
        let spec = spec.flatten_all()?.to_vec1::<f32>()?;
        // Magnitudes, time-major per row: [n, FRAMES, 129].
        let mut x = vec![0f32; n * FRAMES * FREQS];
        for (m, c) in x.chunks_exact_mut(FREQS).zip(spec.chunks_exact(2 * FREQS)) {
            let (re, im) = c.split_at(FREQS);
            for ((m, a), b) in m.iter_mut().zip(re).zip(im) {
                *m = (a * a + b * b).sqrt();
            }
        }
        let mut t = FRAMES;
        for conv in &self.convs {
            let (y, t_out) = conv.forward(&x, n, t)?;
            x = y;
            t = t_out;
        }
        debug_assert_eq!(t, 1);
        let gates = Tensor::from_vec(x, (n, HIDDEN), cpu)?.matmul(&self.w_ih)?;
        let mut gates = gates.flatten_all()?.to_vec1::<f32>()?;
        for g in gates.chunks_exact_mut(4 * HIDDEN) {
            for (v, b) in g.iter_mut().zip(&self.bias) {
                *v += b;
            }
        }
        Ok(gates)
    }

    /// Step 3–4: the LSTM across rows, then the output head; appends one probability per row.
    fn recur(&self, gates_x: &[f32], state: &mut SileroState, probs: &mut Vec<f32>) {
        let mut g = vec![0f32; 4 * HIDDEN];
        for gx in gates_x.chunks_exact(4 * HIDDEN) {
            lstm::step(&self.w_hh_t, gx, &mut state.h, &mut state.c, &mut g);
            let mut logit = self.out_b;
            for (h, w) in state.h.iter().zip(&self.out_w) {
                logit += h.max(0.0) * w;
            }
            probs.push(sigmoid(logit));
        }
    }
}

impl Conv {
    /// `x: [n, t, c_in]` → (`[n, t_out, c_out]` after ReLU, `t_out`), kernel 3, padding 1.
    fn forward(&self, x: &[f32], n: usize, t: usize) -> candle_core::Result<(Vec<f32>, usize)> {
        let t_out = (t + 2 - 3) / self.stride + 1;
        let k = self.c_in * 3;
        // im2col in the weights' (c_in, tap) order.
        let mut cols = vec![0f32; n * t_out * k];
        for r in 0..n {
            for to in 0..t_out {
                let dst = &mut cols[(r * t_out + to) * k..][..k];
                for tap in 0..3 {
                    let ti = (to * self.stride + tap) as isize - 1;
                    if ti < 0 || ti as usize >= t {
                        continue;
                    }
                    let src = &x[(r * t + ti as usize) * self.c_in..][..self.c_in];
                    for (c, v) in src.iter().enumerate() {
                        dst[c * 3 + tap] = *v;
                    }
                }
            }
        }
        let y = Tensor::from_vec(cols, (n * t_out, k), &Device::Cpu)?.matmul(&self.w)?;
        let mut y = y.flatten_all()?.to_vec1::<f32>()?;
        for row in y.chunks_exact_mut(self.c_out) {
            for (v, b) in row.iter_mut().zip(&self.b) {
                *v = (*v + b).max(0.0);
            }
        }
        Ok((y, t_out))
    }
}

fn candle_err(e: candle_core::Error) -> Error {
    Error::internal(format!("Silero VAD: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry() {
        assert_eq!(FRAMES, 4);
        assert_eq!(
            transpose(&[1., 2., 3., 4., 5., 6.], 2, 3),
            vec![1., 4., 2., 5., 3., 6.]
        );
    }
}
