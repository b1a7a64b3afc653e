//! The bigram optimum Bob is held against: the smoothed count estimate of p(next byte | byte)
//! straight from the training stream, scored on the same held-out windows `score` uses. The
//! add-k smoothing is picked from a small grid by held-out score, so it is the best such table.

use std::path::Path;

use alpha_data::{Split, TokenStream};
use anyhow::Result;

pub struct BigramOptimum {
    pub bits_per_byte: f64,
    pub loss: f64,
    pub k: f64,
    pub training_tokens: u64,
}

/// Counts over the first `trained_tokens` of the training split (the whole split if `None` or
/// more), scored on `max_windows` held-out windows of `context + 1` tokens (the windows `score`
/// reads).
pub fn bigram_optimum(
    data: &Path,
    vocab: usize,
    context: usize,
    max_windows: usize,
    trained_tokens: Option<u64>,
) -> Result<BigramOptimum> {
    let mut train = TokenStream::open(data, Split::Train)?;
    let total = trained_tokens.map_or(train.len_tokens(), |n| n.min(train.len_tokens()));
    let mut counts = vec![0u64; vocab * vocab];
    let chunk = 1 << 20;
    let mut buf = vec![0u32; chunk];
    let mut prev: Option<u32> = None;
    let mut at = 0u64;
    while at < total {
        let n = chunk.min((total - at) as usize);
        train.read_at(at, &mut buf[..n])?;
        for &tok in &buf[..n] {
            if let Some(p) = prev {
                counts[p as usize * vocab + tok as usize] += 1;
            }
            prev = Some(tok);
        }
        at += n as u64;
    }
    let mut valid = TokenStream::open(data, Split::Valid)?;
    let windows = valid.heldout_windows(context + 1, max_windows)?;
    let bytes: u64 = windows.iter().map(|w| valid.decoded_bytes(&w[1..])).sum();
    let tokens = (windows.len() * context) as f64;
    let mut best: Option<BigramOptimum> = None;
    for k in [0.01, 0.03, 0.1, 0.3, 1.0] {
        let mut nll = 0.0;
        for w in &windows {
            for pair in w.windows(2) {
                let row = &counts[pair[0] as usize * vocab..(pair[0] as usize + 1) * vocab];
                let total: u64 = row.iter().sum();
                let p = (row[pair[1] as usize] as f64 + k) / (total as f64 + k * vocab as f64);
                nll -= p.ln();
            }
        }
        let bpb = nll / std::f64::consts::LN_2 / bytes as f64;
        if best.as_ref().is_none_or(|b| bpb < b.bits_per_byte) {
            best = Some(BigramOptimum { bits_per_byte: bpb, loss: nll / tokens, k, training_tokens: total });
        }
    }
    Ok(best.expect("the grid is not empty"))
}
