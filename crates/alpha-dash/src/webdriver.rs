//! A minimal W3C WebDriver client for the dashboard's browser tests: start chromedriver,
//! open a headless Chromium session, load a page, run scripts, take screenshots.
//!
//! WebDriver is JSON over HTTP to a local chromedriver, so a few std-only requests do what the
//! tests need without a WebDriver crate and its HTTP/TLS stack in the build.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

/// Debian's paths, where `apt-get install chromium chromium-driver` puts them.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A headless Chromium driven through chromedriver; both end on drop.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

impl Browser {
    /// Whether Debian's Chromium and chromedriver are installed (tests skip without them).
    pub fn available() -> bool {
        Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists()
    }

    /// Starts chromedriver and a headless session with a fresh profile in `profile_dir`, its
    /// window `width`×`height` CSS pixels.
    pub fn launch(profile_dir: &Path, width: u32, height: u32) -> anyhow::Result<Browser> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {CHROMEDRIVER}"))?;
        let mut b = Browser { driver, port, session: String::new() };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("chromedriver did not listen on port {port} within 20 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let args = [
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--hide-scrollbars".into(),
            "--force-device-scale-factor=1".into(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile_dir.display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let v = b.request("POST", "/session", Some(caps))?;
        b.session = v["sessionId"].as_str().context("no sessionId in chromedriver's answer")?.to_string();
        Ok(b)
    }

    /// Loads `url` and waits for the document to load.
    pub fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.session_request("POST", "url", Some(json!({"url": url})))?;
        Ok(())
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub fn execute(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        self.session_request("POST", "execute/sync", Some(json!({"script": script, "args": args})))
    }

    /// Reruns `script` until it returns something truthy, which it then returns.
    pub fn wait_for(&self, script: &str, timeout: Duration) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.execute(script, vec![])?;
            let truthy = !matches!(&v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("");
            if truthy {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("timed out after {timeout:?} waiting for: {script}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Resizes the window (CSS pixels).
    pub fn resize(&self, width: u32, height: u32) -> anyhow::Result<()> {
        self.session_request("POST", "window/rect", Some(json!({"width": width, "height": height})))?;
        Ok(())
    }

    /// A PNG of the viewport.
    pub fn screenshot_png(&self) -> anyhow::Result<Vec<u8>> {
        let v = self.session_request("GET", "screenshot", None)?;
        base64_decode(v.as_str().context("screenshot is not a string")?)
    }

    /// A PNG of the whole page: the window grows to the document's height first.
    pub fn full_page_png(&self, width: u32) -> anyhow::Result<Vec<u8>> {
        let h = self.execute("return document.documentElement.scrollHeight", vec![])?.as_u64().unwrap_or(1000);
        // Window chrome is zero in headless mode; cap the height to keep the PNG reasonable.
        self.resize(width, (h as u32).clamp(600, 12_000))?;
        std::thread::sleep(Duration::from_millis(400)); // let charts redraw at the new size
        self.screenshot_png()
    }

    /// A PNG of the first element matching the CSS `selector`, scrolled into view.
    pub fn element_png(&self, selector: &str) -> anyhow::Result<Vec<u8>> {
        let e = self.session_request("POST", "element", Some(json!({"using": "css selector", "value": selector})))?;
        let id = e
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .with_context(|| format!("no element matches {selector}"))?
            .to_string();
        let v = self.session_request("GET", &format!("element/{id}/screenshot"), None)?;
        base64_decode(v.as_str().context("screenshot is not a string")?)
    }

    fn session_request(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        self.request(method, &format!("/session/{}/{path}", self.session), body)
    }

    /// One WebDriver command; answers the `value` field, or the driver's error as an error.
    fn request(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).context("connecting to chromedriver")?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )?;
        // chromedriver keeps the connection open whatever the request says, so the answer is
        // read by its length (or its chunks), never to the end of the stream.
        let mut raw = Vec::new();
        let mut buf = [0u8; 64 * 1024];
        let split = loop {
            if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            let n = s.read(&mut buf).context("reading chromedriver's answer")?;
            if n == 0 {
                bail!("chromedriver closed the connection mid-answer");
            }
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
        let mut payload = raw[split + 4..].to_vec();
        let length =
            head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok());
        let chunked = head.contains("transfer-encoding: chunked");
        loop {
            let done = match length {
                Some(n) => payload.len() >= n,
                None if chunked => payload.windows(5).any(|w| w == b"0\r\n\r\n"),
                None => false,
            };
            if done {
                break;
            }
            let n = s.read(&mut buf).context("reading chromedriver's answer")?;
            if n == 0 {
                break;
            }
            payload.extend_from_slice(&buf[..n]);
        }
        if chunked {
            payload = dechunk(&payload)?;
        }
        let v: Value = serde_json::from_slice(&payload).with_context(|| {
            format!("chromedriver answered {method} {path} with: {}", String::from_utf8_lossy(&payload))
        })?;
        let value = v.get("value").cloned().unwrap_or(Value::Null);
        if let Some(e) = value.get("error").and_then(Value::as_str) {
            bail!("WebDriver {method} {path}: {e}: {}", value["message"].as_str().unwrap_or(""));
        }
        Ok(value)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.request("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn dechunk(mut data: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = data.windows(2).position(|w| w == b"\r\n").context("bad chunk header")?;
        let size_text = std::str::from_utf8(&data[..eol])?.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(data.get(..size).context("short chunk")?);
        data = data.get(size + 2..).unwrap_or(&[]);
    }
}

/// Standard base64 (with padding), as WebDriver's screenshot answers.
pub fn base64_decode(text: &str) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' => continue,
            _ => bail!("not base64: byte {c}"),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_chunked_decoding() {
        assert_eq!(base64_decode("iVBORw0KGgo=").unwrap(), b"\x89PNG\r\n\x1a\n");
        assert_eq!(base64_decode("YWJj").unwrap(), b"abc");
        assert_eq!(base64_decode("YQ==").unwrap(), b"a");
        assert!(base64_decode("a*b").is_err());
        assert_eq!(dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(), b"abcde");
    }
}
