//! Writes every kernel's PTX to a folder (for `ptxas -arch=sm_90a -v`).
fn main() -> anyhow::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "ptx".into());
    std::fs::create_dir_all(&dir)?;
    for k in alpha_cuda::catalog() {
        k.check_budget()?;
        std::fs::write(format!("{dir}/{}.ptx", k.name), k.render())?;
    }
    Ok(())
}
