//! `alpha serve`: the live dashboard over a folder of run records.
//!
//! The server reads `runs/<name>/` as the trainer writes it (see [`records`]) and answers a
//! small JSON API; three HTML pages (the runs, one run, the systems catalogue) poll it every
//! two seconds and draw their charts as SVG with the page's own script. Everything the pages
//! need is compiled into the binary, so a page loads with no network beyond this server.
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /api/runs` | every run: system, device, state, steps, latest loss |
//! | `GET /api/runs/{name}` | `run.json`, the headline figures, each file's skipped-line count |
//! | `GET /api/runs/{name}/points?since=N` | `points.jsonl` rows from row N on, as columns |
//! | `GET /api/runs/{name}/lineage` | `lineage.jsonl` as written (oldest first) |
//! | `GET /api/runs/{name}/invocations` | `invocations.jsonl` |
//! | `GET /api/runs/{name}/health` | `health.jsonl`: each health step's norms and non-finite counts by tensor |
//! | `GET /api/runs/{name}/profile?step=S` | kernel-family and GEMM-shape tables of a profiled step |
//! | `GET /api/runs/{name}/telemetry?since=T&max=M` | telemetry columns, averaged to at most M points |
//! | `POST /api/runs/{name}/probe` | `{checkpoint, prompt, tokens}` → the model's continuation and next-token guesses |
//! | `GET /api/runs/{name}/gates` | the run's system's gate ledger in order, which records the run relied on, whether it skipped them |
//! | `GET /api/runs/{name}/curve` | held-out bits per byte (± standard error) at each scored checkpoint against training seconds and joules, with the text sampled there |
//! | `GET /api/runs/{name}/views` | the run's system's model views: its static tables and points, and each tracked view's series at every kept checkpoint |
//! | `GET /api/systems` | the systems catalogue: each system's devices, gate standing and runs, from the records |
//!
//! Bad input is never fatal once the server runs: unparseable JSONL lines are skipped and
//! counted; a run without `run.json` shows as "unknown"; a "running" run whose process is gone
//! shows as "interrupted". Before it runs, a missing runs folder and a port in use are errors
//! that say so.
//!
//! What a page of another site, or a hostile runs folder, can make it do is bounded:
//! - a request must name this server in `Host` ([`HostCheck`]: DNS rebinding is refused), and a
//!   POST from a page must come from the dashboard's own origin; otherwise 403;
//! - every file read (run folders, record files, a lineage row's checkpoint) must lie inside the
//!   runs folder once links are resolved ([`store::confine`]); links out are skipped and noted;
//! - at most [`MAX_PROBES_IN_FLIGHT`] probes run at once (more get 429 and `Retry-After`), and a
//!   loaded checkpoint is kept for the next probe of it ([`PROBE_CACHE_ENTRIES`]);
//! - each poll reads only what was appended to a record, at most [`records::MAX_READ_BYTES`],
//!   and an unterminated line is held only up to [`records::MAX_LINE_BYTES`].

pub mod records;
pub mod store;
pub mod views;
pub mod webdriver;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use store::RunStore;

/// One system of the catalogue page, as the CLI knows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SystemInfo {
    pub name: String,
    pub description: String,
    pub parameters: u64,
}

/// What a model says after a prompt.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProbeResult {
    /// A short greedy continuation of the prompt.
    pub continuation: String,
    /// The most likely next tokens and their probabilities, most likely first.
    pub top_next: Vec<(String, f64)>,
}

/// Loads checkpoints for the prompt probe; the CLI supplies it because only it knows the systems.
pub trait Probe: Send + Sync {
    /// Loads `checkpoint` (of the run in `run_dir`) and compiles what runs it: the costly part
    /// of a probe, done once a checkpoint while the dashboard keeps the result (a few, the most
    /// recently used).
    fn load(&self, run_dir: &Path, checkpoint: &Path) -> anyhow::Result<Arc<dyn LoadedModel>>;
}

/// A checkpoint ready to answer prompts.
pub trait LoadedModel: Send + Sync {
    /// A greedy continuation of `prompt`, `tokens` long, and the likeliest next tokens.
    fn probe(&self, prompt: &str, tokens: usize) -> anyhow::Result<ProbeResult>;
}

/// Probes that may run at once; more are answered 429 with a `Retry-After`. Each holds a
/// compiled program and a copy of the weights while it runs, and the host has few cores.
pub const MAX_PROBES_IN_FLIGHT: usize = 2;

/// Loaded checkpoints kept for later probes (least recently used dropped first).
pub const PROBE_CACHE_ENTRIES: usize = 2;

/// The longest prompt a probe takes, in bytes.
pub const MAX_PROMPT_BYTES: usize = 4096;

/// How `alpha serve` runs.
#[derive(Clone)]
pub struct ServeOptions {
    pub runs_dir: PathBuf,
    /// 0 picks a free port (printed on start).
    pub port: u16,
    pub host: IpAddr,
    pub catalogue: Vec<SystemInfo>,
    pub probe: Option<Arc<dyn Probe>>,
    /// The serving build's identity (see `alpha_run::gates::build_identity`): the catalogue
    /// says whether a gate standing is this build's. None: unknown.
    pub build: Option<String>,
}

impl ServeOptions {
    /// `runs_dir` on 127.0.0.1:[`DEFAULT_PORT`], no catalogue and no probe.
    pub fn new(runs_dir: impl Into<PathBuf>) -> Self {
        ServeOptions {
            runs_dir: runs_dir.into(),
            port: DEFAULT_PORT,
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            catalogue: Vec::new(),
            probe: None,
            build: None,
        }
    }
}

/// The port `alpha serve` uses without `--port`.
pub const DEFAULT_PORT: u16 = 8080;

/// Serves until interrupted (Ctrl-C); blocking, on a runtime of its own.
pub fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    let server = Server::bind(opts)?;
    println!("alpha serve: http://{}/ — runs from {} (Ctrl-C stops)", server.local_addr(), server.runs_dir().display());
    server.run_until(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

/// A dashboard bound to its port but not yet serving: binding first lets the caller learn the
/// port (and report a port in use) before anything runs.
pub struct Server {
    listener: std::net::TcpListener,
    router: Router,
    runs_dir: PathBuf,
}

impl Server {
    /// Checks the runs folder and binds the port; each failure says what to do.
    pub fn bind(opts: ServeOptions) -> anyhow::Result<Server> {
        let runs_dir = opts.runs_dir.clone();
        check_runs_dir(&runs_dir)?;
        let addr = SocketAddr::new(opts.host, opts.port);
        let listener = std::net::TcpListener::bind(addr).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
                "port {} is in use on {}: another program is listening there; choose another with --port",
                opts.port,
                opts.host
            ),
            _ => anyhow::Error::new(e).context(format!("cannot listen on {addr}")),
        })?;
        listener.set_nonblocking(true)?;
        // Hosts are checked against the port actually bound (`--port 0` picks one).
        let bound = listener.local_addr()?;
        let opts = ServeOptions { host: bound.ip(), port: bound.port(), ..opts };
        Ok(Server { listener, router: router(opts), runs_dir })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    pub fn runs_dir(&self) -> &Path {
        &self.runs_dir
    }

    /// Serves until `shutdown` completes.
    pub fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the server's runtime")?;
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(self.listener)?;
            axum::serve(listener, self.router).with_graceful_shutdown(shutdown).await
        })
        .context("serving the dashboard")
    }

    /// Serves on a background thread until the returned handle is stopped or dropped.
    pub fn spawn(self) -> RunningServer {
        let addr = self.local_addr();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            if let Err(e) = self.run_until(async {
                let _ = rx.await;
            }) {
                eprintln!("alpha serve: {e:#}");
            }
        });
        RunningServer { addr, stop: Some(tx), thread: Some(thread) }
    }
}

/// A server started by [`Server::spawn`].
pub struct RunningServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunningServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:port`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn check_runs_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => anyhow::bail!("the runs folder {} is a file, not a folder", dir.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "the runs folder {} does not exist: train a run into it first (its records go in <runs>/<name>/), or pass --runs DIR",
            dir.display()
        ),
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot read the runs folder {}", dir.display()))),
    }
}

struct AppState {
    store: RunStore,
    catalogue: Vec<SystemInfo>,
    probe: Option<Arc<dyn Probe>>,
    build: Option<String>,
    /// One permit a probe in flight.
    probes_in_flight: Arc<tokio::sync::Semaphore>,
    loaded: Mutex<ProbeCache>,
    views: views::ViewCache,
}

type St = State<Arc<AppState>>;

/// What identifies a loaded checkpoint: its real path, the digest its lineage row gives, and
/// the file's size and modification time (a file rewritten in place is loaded again).
#[derive(Clone, Debug, PartialEq, Eq)]
struct ProbeKey {
    path: PathBuf,
    sha256: String,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

/// The most recently used loaded checkpoints, newest last.
#[derive(Default)]
struct ProbeCache {
    entries: Vec<(ProbeKey, Arc<dyn LoadedModel>)>,
}

impl ProbeCache {
    fn get(&mut self, key: &ProbeKey) -> Option<Arc<dyn LoadedModel>> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        let entry = self.entries.remove(i);
        let model = entry.1.clone();
        self.entries.push(entry);
        Some(model)
    }

    fn put(&mut self, key: ProbeKey, model: Arc<dyn LoadedModel>) {
        self.entries.retain(|(k, _)| *k != key);
        self.entries.push((key, model));
        let excess = self.entries.len().saturating_sub(PROBE_CACHE_ENTRIES);
        self.entries.drain(..excess);
    }
}

/// The dashboard's routes over `opts.runs_dir` (no check that it exists: [`Server::bind`] does).
/// Requests must name this server in `Host` (see [`HostCheck`]).
pub fn router(opts: ServeOptions) -> Router {
    let hosts = Arc::new(HostCheck { bound: opts.host, port: opts.port });
    let state = Arc::new(AppState {
        store: RunStore::new(opts.runs_dir),
        catalogue: opts.catalogue,
        probe: opts.probe,
        build: opts.build,
        probes_in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_PROBES_IN_FLIGHT)),
        loaded: Mutex::new(ProbeCache::default()),
        views: views::ViewCache::default(),
    });
    Router::new()
        .route("/", get(|| page("runs", String::new())))
        .route("/systems", get(|| page("systems", String::new())))
        .route("/runs/{name}", get(|UrlPath(name): UrlPath<String>| page("run", name)))
        .route("/assets/app.js", get(|| asset("text/javascript; charset=utf-8", APP_JS)))
        .route("/assets/style.css", get(|| asset("text/css; charset=utf-8", STYLE_CSS)))
        .route("/favicon.svg", get(|| asset("image/svg+xml", FAVICON)))
        .route("/api/runs", get(api_runs))
        .route("/api/runs/{name}", get(api_run))
        .route("/api/runs/{name}/views", get(api_views))
        .route("/api/runs/{name}/points", get(api_points))
        .route("/api/runs/{name}/lineage", get(api_lineage))
        .route("/api/runs/{name}/invocations", get(api_invocations))
        .route("/api/runs/{name}/health", get(api_health))
        .route("/api/runs/{name}/profile", get(api_profile))
        .route("/api/runs/{name}/telemetry", get(api_telemetry))
        .route("/api/runs/{name}/probe", post(api_probe))
        .route("/api/runs/{name}/gates", get(api_gates))
        .route("/api/runs/{name}/curve", get(api_curve))
        .route("/api/systems", get(api_systems))
        .fallback(|| async { err(StatusCode::NOT_FOUND, "no such page") })
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(hosts, check_host_and_origin))
}

/// Which `Host` (and `Origin`) a request may name. A page of another site can reach this
/// server by rebinding its own name to 127.0.0.1 (DNS rebinding); its requests then carry that
/// name in `Host`, which is refused here. Allowed: `localhost`, a loopback address, the bound
/// address, and, when bound to every interface, any IP address (a rebinding needs a name);
/// each with the bound port.
#[derive(Clone, Debug)]
pub struct HostCheck {
    pub bound: IpAddr,
    pub port: u16,
}

impl HostCheck {
    /// Whether `host` (a `Host` header's value, `name[:port]`) names this server.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim();
        let (name, port) = match host.rsplit_once(':') {
            // `[::1]:8080` or `name:8080`, but not the bare `::1` of a malformed header.
            Some((name, port)) if !name.contains(':') || name.ends_with(']') => (name, Some(port)),
            _ => (host, None),
        };
        let port_ok = match port {
            Some(p) => p.parse::<u16>() == Ok(self.port),
            None => self.port == 80,
        };
        if !port_ok {
            return false;
        }
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if name == "localhost" {
            return true;
        }
        let literal = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(&name);
        match literal.parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback() || ip == self.bound || self.bound.is_unspecified(),
            Err(_) => false,
        }
    }
}

/// Refuses (403) a request whose `Host` is not this server's, and a request that may change
/// something or costs work (any but GET and HEAD: the probe) sent by another origin.
async fn check_host_and_origin(
    State(hosts): State<Arc<HostCheck>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host =
        req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).or(req.uri().authority().map(|a| a.as_str()));
    let Some(host) = host.filter(|h| hosts.allows(h)) else {
        let named = req.headers().get(header::HOST).map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
        return err(
            StatusCode::FORBIDDEN,
            format!(
                "refused: the request's Host {} is not this server (127.0.0.1, localhost or {} on port {}); \
                 a page of another site cannot reach the dashboard; open it by one of those addresses",
                named.map_or("(none)".to_string(), |h| format!("{h:?}")),
                hosts.bound,
                hosts.port
            ),
        );
    };
    let safe = req.method() == axum::http::Method::GET || req.method() == axum::http::Method::HEAD;
    if !safe {
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let origin = String::from_utf8_lossy(origin.as_bytes());
            let own = format!("http://{host}");
            if !origin.eq_ignore_ascii_case(&own) {
                return err(
                    StatusCode::FORBIDDEN,
                    format!(
                        "refused: a request from Origin {origin:?}; only the dashboard's own pages ({own}) may send it"
                    ),
                );
            }
        }
    }
    next.run(req).await
}

const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");
const PAGE_HTML: &str = include_str!("assets/page.html");
const FAVICON: &str = include_str!("assets/favicon.svg");

async fn page(kind: &str, run: String) -> Html<String> {
    let title = match kind {
        "run" => format!("{run} · Alpha"),
        "systems" => "Systems · Alpha".to_string(),
        _ => "Runs · Alpha".to_string(),
    };
    Html(PAGE_HTML.replace("{{title}}", &escape(&title)).replace("{{page}}", kind).replace("{{run}}", &escape(&run)))
}

async fn asset(mime: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, mime), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn err(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(json!({"error": msg.into()}))).into_response()
}

fn no_run(name: &str) -> Response {
    err(StatusCode::NOT_FOUND, format!("no run named {name:?} in the runs folder"))
}

async fn api_runs(State(st): St) -> Response {
    let (names, skipped) = match st.store.list_noting() {
        Ok(n) => n,
        Err(e) => {
            let msg = format!("cannot read the runs folder {}: {e}", st.store.runs_dir.display());
            return err(StatusCode::INTERNAL_SERVER_ERROR, msg);
        }
    };
    let runs: Vec<Value> = names
        .iter()
        .filter_map(|n| {
            let rec = st.store.get(n)?;
            let mut r = rec.lock().unwrap();
            r.refresh_core();
            Some(r.summary(n))
        })
        .collect();
    Json(json!({"runs_dir": st.store.runs_dir, "runs": runs, "skipped": skipped})).into_response()
}

/// Runs `f` on run `name`'s records after following every file.
fn with_run(st: &AppState, name: &str, f: impl FnOnce(&store::RunRecords) -> Value) -> Response {
    let Some(rec) = st.store.get(name) else { return no_run(name) };
    let mut r = rec.lock().unwrap();
    r.refresh_all();
    Json(f(&r)).into_response()
}

async fn api_run(State(st): St, UrlPath(name): UrlPath<String>) -> Response {
    with_run(&st, &name, |r| {
        let run = match &r.info {
            Ok(i) => serde_json::to_value(i).unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        json!({
            "name": name,
            "runs_dir": st.store.runs_dir,
            "state": r.state(),
            "run": run,
            "problem": r.info.as_ref().err(),
            "headline": r.headline(),
            "files": r.files(),
            "skipped_lines": r.skipped_total(),
            "probe_available": st.probe.is_some(),
        })
    })
}

#[derive(Deserialize)]
struct Since {
    since: Option<usize>,
}

async fn api_points(State(st): St, UrlPath(name): UrlPath<String>, Query(q): Query<Since>) -> Response {
    with_run(&st, &name, |r| r.points_since(q.since.unwrap_or(0)))
}

async fn api_lineage(State(st): St, UrlPath(name): UrlPath<String>) -> Response {
    with_run(&st, &name, |r| json!({"rows": r.lineage.rows(), "health": r.files()["lineage"]}))
}

async fn api_invocations(State(st): St, UrlPath(name): UrlPath<String>) -> Response {
    with_run(&st, &name, |r| json!({"rows": r.invocations.rows(), "health": r.files()["invocations"]}))
}

async fn api_health(State(st): St, UrlPath(name): UrlPath<String>) -> Response {
    with_run(&st, &name, |r| json!({"rows": r.health.rows(), "file": r.files()["health"]}))
}

#[derive(Deserialize)]
struct StepQ {
    step: Option<u64>,
}

async fn api_profile(State(st): St, UrlPath(name): UrlPath<String>, Query(q): Query<StepQ>) -> Response {
    with_run(&st, &name, |r| serde_json::to_value(r.profile_tables(q.step)).unwrap_or(Value::Null))
}

#[derive(Deserialize)]
struct TelemetryQ {
    since: Option<f64>,
    max: Option<usize>,
}

async fn api_telemetry(State(st): St, UrlPath(name): UrlPath<String>, Query(q): Query<TelemetryQ>) -> Response {
    with_run(&st, &name, |r| r.telemetry_series(q.since, q.max.unwrap_or(1500).clamp(10, 20_000)))
}

#[derive(Deserialize)]
struct ProbeRequest {
    checkpoint: String,
    prompt: String,
    #[serde(default = "default_probe_tokens")]
    tokens: usize,
}

fn default_probe_tokens() -> usize {
    32
}

async fn api_probe(State(st): St, UrlPath(name): UrlPath<String>, Json(req): Json<ProbeRequest>) -> Response {
    let Some(probe) = st.probe.clone() else {
        return err(StatusCode::NOT_IMPLEMENTED, "this server has no prompt probe (the CLI supplies one)");
    };
    let Some(rec) = st.store.get(&name) else { return no_run(&name) };
    // Only a checkpoint the lineage lists can be probed, so a request names no other file.
    let (dir, root, row) = {
        let mut r = rec.lock().unwrap();
        r.refresh_all();
        // The newest row of that path: a checkpoint rewritten by a rerun has a row each time.
        let row = r.lineage.rows().iter().rev().find(|l| l.path == req.checkpoint).cloned();
        (r.dir.clone(), r.root().to_path_buf(), row)
    };
    let Some(row) = row else {
        return err(StatusCode::BAD_REQUEST, format!("{:?} is not a checkpoint in this run's lineage", req.checkpoint));
    };
    if req.tokens == 0 || req.tokens > 512 {
        return err(StatusCode::BAD_REQUEST, "tokens must be between 1 and 512");
    }
    if req.prompt.len() > MAX_PROMPT_BYTES {
        return err(
            StatusCode::BAD_REQUEST,
            format!("the prompt is {} bytes; at most {MAX_PROMPT_BYTES}", req.prompt.len()),
        );
    }
    // The lineage row's path is data, not trusted: it must lead to a file inside the runs folder.
    let ckpt = match store::confine(&root, &dir.join(&row.path)) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return err(StatusCode::FORBIDDEN, format!("checkpoint {:?} is not read: {e}", row.path))
        }
        Err(e) => return err(StatusCode::NOT_FOUND, format!("checkpoint {:?}: {e}", row.path)),
    };
    let meta = match std::fs::metadata(&ckpt) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return err(StatusCode::NOT_FOUND, format!("checkpoint {:?} is not a file", row.path)),
        Err(e) => return err(StatusCode::NOT_FOUND, format!("checkpoint {:?}: {e}", row.path)),
    };
    let Ok(permit) = st.probes_in_flight.clone().try_acquire_owned() else {
        let mut resp = err(
            StatusCode::TOO_MANY_REQUESTS,
            format!("{MAX_PROBES_IN_FLIGHT} probes are already running; try again in a moment"),
        );
        resp.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return resp;
    };
    let key =
        ProbeKey { path: ckpt.clone(), sha256: row.sha256.clone(), len: meta.len(), modified: meta.modified().ok() };
    let state = st.clone();
    let result = tokio::task::spawn_blocking(move || {
        // Held until the probe ends, even if the client has gone.
        let _permit = permit;
        let cached = state.loaded.lock().unwrap_or_else(|p| p.into_inner()).get(&key);
        let model = match cached {
            Some(m) => m,
            None => {
                let m = probe.load(&dir, &ckpt)?;
                state.loaded.lock().unwrap_or_else(|p| p.into_inner()).put(key, m.clone());
                m
            }
        };
        model.probe(&req.prompt, req.tokens)
    })
    .await;
    match result {
        Ok(Ok(r)) => Json(r).into_response(),
        Ok(Err(e)) => err(StatusCode::UNPROCESSABLE_ENTITY, format!("{e:#}")),
        Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, format!("the probe failed: {e}")),
    }
}

/// `system`'s gate ledger under the runs folder, oldest first; a ledger outside the runs folder
/// (a link out) or missing has no rows.
fn gate_ledger(st: &AppState, system: &str) -> Vec<alpha_records::GateRecord> {
    let path = alpha_records::gate_ledger(&st.store.runs_dir, system);
    let mut ledger = records::Jsonl::<alpha_records::GateRecord>::confined(path, st.store.root().to_path_buf());
    let _ = ledger.refresh();
    ledger.rows().to_vec()
}

async fn api_gates(State(st): St, UrlPath(name): UrlPath<String>) -> Response {
    let Some(rec) = st.store.get(&name) else { return no_run(&name) };
    let info = {
        let mut r = rec.lock().unwrap();
        r.refresh_core();
        r.info.clone().ok()
    };
    let Some(info) = info else {
        return Json(
            json!({"records": [], "run_gates": null, "note": "no run.json yet: the run's system is not known"}),
        )
        .into_response();
    };
    let ledger = gate_ledger(&st, &info.system);
    // A record counts for the run when it judged the build and device the run started on.
    let records: Vec<Value> = ledger
        .iter()
        .map(|g| {
            let mut v = serde_json::to_value(g).unwrap_or(Value::Null);
            let counts = info.gates.as_ref().is_some_and(|rg| rg.build == g.build && rg.device == g.device);
            v["for_this_run"] = json!(counts);
            v
        })
        .collect();
    let note = match (&info.gates, info.device.as_str()) {
        (Some(g), _) if g.skipped => format!(
            "Started with --skip-gates: no passing record of the {} gate(s) for its build on the {}.",
            g.missing.join(", "),
            g.device
        ),
        (Some(g), _) => format!("Every gate passed for its build on the {} before it started.", g.device),
        (None, "cpu") => "A CPU run needs no gates: the CPU is the reference they compare against.".into(),
        (None, _) => "This run recorded no gate check (written by a trainer that did not check them).".into(),
    };
    Json(json!({
        "system": info.system,
        "device": info.device,
        "ledger": alpha_records::gate_ledger(Path::new(""), &info.system),
        "run_gates": info.gates,
        "note": note,
        "records": records,
    }))
    .into_response()
}

async fn api_curve(State(st): St, UrlPath(name): UrlPath<String>) -> Response {
    with_run(&st, &name, |r| {
        let points: Vec<Value> = r
            .lineage
            .rows()
            .iter()
            .filter(|l| l.heldout_bpb.is_some())
            .map(|l| {
                json!({"step": l.step, "branch": l.branch.unwrap_or(0), "device_s": l.device_s, "energy_j": l.energy_j,
                       "bpb": l.heldout_bpb, "bpb_se": l.heldout_bpb_se, "loss": l.heldout_loss, "loss_se": l.heldout_loss_se,
                       "sample_prompt": l.sample_prompt, "sample": l.sample})
            })
            .collect();
        let info = r.info.as_ref().ok();
        // What the figures score when not the run's own held-out windows (`--heldout-bytes`).
        let heldout = info.and_then(|i| i.heldout.clone());
        json!({"name": name, "system": info.map(|i| i.system.clone()), "device": info.map(|i| i.device.clone()),
               "heldout": heldout, "points": points})
    })
}

async fn api_views(State(st): St, UrlPath(name): UrlPath<String>) -> Response {
    let Some(rec) = st.store.get(&name) else { return no_run(&name) };
    let (system, kept) = {
        let mut r = rec.lock().unwrap();
        r.refresh_all();
        let Ok(info) = &r.info else {
            return Json(
                json!({"system": null, "views": [], "note": "no run.json yet: the run's system is not known"}),
            )
            .into_response();
        };
        // The newest row of each path (a rerun rewrites a checkpoint), oldest first; a file
        // that is gone is no longer kept, and one that leads out of the runs folder is not read.
        let rows = r.lineage.rows();
        let mut kept = vec![];
        for (i, row) in rows.iter().enumerate() {
            if rows[i + 1..].iter().any(|later| later.path == row.path) {
                continue;
            }
            let file = match store::confine(r.root(), &r.dir.join(&row.path)) {
                Ok(p) => Ok(p),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => Err(format!("not read: {e}")),
            };
            kept.push(views::Kept {
                step: row.step,
                branch: row.branch.unwrap_or(0),
                path: row.path.clone(),
                sha256: row.sha256.clone(),
                file,
            });
        }
        (info.system.clone(), kept)
    };
    let state = st.clone();
    match tokio::task::spawn_blocking(move || views::answer(&state.views, &system, &kept)).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, format!("reading the views failed: {e}")),
    }
}

async fn api_systems(State(st): St) -> Response {
    // Each system's runs, from run.json's "system" field, with the newest held-out score.
    let mut runs_of: std::collections::HashMap<String, Vec<(Value, alpha_records::catalogue::RunFact)>> =
        Default::default();
    for name in st.store.list().unwrap_or_default() {
        if let Some(rec) = st.store.get(&name) {
            let mut r = rec.lock().unwrap();
            r.refresh_all();
            if let Ok(i) = &r.info {
                let bpb = r.lineage.rows().iter().rev().find_map(|l| l.heldout_bpb);
                let fact = alpha_records::catalogue::RunFact::of(&name, i, bpb);
                let shown = json!({"name": name, "state": r.state(), "device": i.device, "steps_done": i.steps_done});
                runs_of.entry(i.system.to_lowercase()).or_default().push((shown, fact));
            }
        }
    }
    let systems: Vec<Value> = st
        .catalogue
        .iter()
        .map(|s| {
            let runs = runs_of.get(&s.name.to_lowercase()).cloned().unwrap_or_default();
            let facts: Vec<_> = runs.iter().map(|(_, f)| f.clone()).collect();
            let ledger = gate_ledger(&st, &s.name);
            let devices = alpha_records::catalogue::device_facts(&ledger, &facts, st.build.as_deref());
            let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
            v["runs"] = json!(runs.into_iter().map(|(v, _)| v).collect::<Vec<_>>());
            v["devices"] = json!(devices);
            v["gate_records"] = json!(ledger.len());
            v
        })
        .collect();
    Json(json!({"systems": systems, "build": st.build})).into_response()
}

#[cfg(test)]
mod tests;
