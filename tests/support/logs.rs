//! The log lines of every gateway in one test binary, captured in process: a global subscriber
//! installed the first time [`capture_logs`] is called (a scoped one misses events whose callsite
//! another test's thread registered first).

use std::sync::{Arc, Mutex};

/// What the gateways of this test binary have logged, from the first [`capture_logs`] on.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

/// The most the capture keeps: every test of the binary logs into it once it is installed, so
/// past this the older half goes (a test reads its lines right after it made them).
const KEEP: usize = 64 << 20;

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut kept = self.0.lock().unwrap();
        if kept.len() + buf.len() > KEEP {
            let half = kept.len() / 2;
            kept.drain(..half);
        }
        kept.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The warnings and errors that name `upstream`.
    pub fn warnings_of(&self, upstream: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(&format!("upstream={upstream} ")))
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .map(str::to_string)
            .collect()
    }
}

/// Installs the capturing subscriber (at debug, no colour) once, and returns its log.
pub fn capture_logs() -> &'static Logs {
    static LOGS: std::sync::OnceLock<Logs> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        logs
    })
}
