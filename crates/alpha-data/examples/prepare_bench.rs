//! Times `alpha_data::prepare` on a corpus and prints the figures recorded in
//! `bench/results/`: `cargo run --release -p alpha-data --example prepare_bench -- \
//!  <corpus> <bytes|bpe:N|tokenizer.json> <out> [bpe_train_bytes]`.

use alpha_data::prepare::{prepare_report, PrepareOptions, TokenizerSpec};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(args.len() >= 3, "usage: prepare_bench <corpus> <tokenizer> <out> [bpe_train_bytes]");
    let mut opts = PrepareOptions::new(&args[0], args[1].parse::<TokenizerSpec>()?, &args[2]);
    if let Some(b) = args.get(3) {
        opts.bpe_train_bytes = b.parse()?;
    }
    let r = prepare_report(&opts)?;
    let m = &r.manifest;
    let t = &r.timings;
    let bytes = m.totals.bytes;
    println!("corpus        {}", args[0]);
    println!(
        "tokenizer     {} vocab {} eot {} sha256 {}",
        m.tokenizer.kind, m.tokenizer.vocab_size, m.tokenizer.eot_id, m.tokenizer.sha256
    );
    println!("threads       {}", rayon::current_num_threads());
    for (name, s) in [("train", &m.train), ("valid", &m.valid)] {
        println!(
            "{name:<13} {} docs, {} bytes, {} tokens, {:.4} bytes/token, {} shards",
            s.documents,
            s.bytes,
            s.tokens,
            s.bytes_per_token,
            s.shards.len()
        );
    }
    println!(
        "load          {:.2} s ({:.1} MB/s of text, incl. decompression)",
        t.load_s,
        bytes as f64 / 1e6 / t.load_s
    );
    println!("tokenizer     {:.2} s (training or loading)", t.train_tokenizer_s);
    println!("encode+write  {:.2} s ({:.1} MB/s of text)", t.encode_s, t.encode_mb_s(bytes));
    println!(
        "total         {:.2} s ({:.1} MB/s end to end; {:.1} MB/s excluding tokenizer training)",
        t.total_s,
        bytes as f64 / 1e6 / t.total_s,
        bytes as f64 / 1e6 / (t.total_s - t.train_tokenizer_s)
    );
    Ok(())
}
