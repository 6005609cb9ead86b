//! A real browser for the status page's tests: headless Chromium driven over WebDriver.
//!
//! [`Browser::start`] runs Debian's `chromedriver` on a loopback port of its own, opens a session
//! with `chromium --headless=new`, and hands out the fantoccini client. The driver is a child
//! process: dropping the [`Browser`] ends the session (which closes Chromium) and kills the driver,
//! also when a test fails half-way. A machine without the two programs fails the test and names the
//! install; it never skips.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// What a machine without the browser must install (also in `.ci/run`).
pub const INSTALL: &str = "sudo apt-get install chromium chromium-driver";

/// A headless Chromium and its chromedriver.
pub struct Browser {
    pub client: Client,
    port: u16,
    session: Option<String>,
    /// Dropped after the session is ended (fields drop after `Browser::drop`).
    _driver: Driver,
}

/// The chromedriver child process, killed when dropped (also when the session never opened).
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `name` on `PATH`, else Debian's `/usr/bin/name`; the test fails (naming the install) if neither.
fn program(name: &str) -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    let path = on_path.unwrap_or_else(|| PathBuf::from("/usr/bin").join(name));
    assert!(
        path.is_file(),
        "`{name}` is not installed: the status page's browser tests need Chromium and its \
         WebDriver: run `{INSTALL}`"
    );
    path
}

impl Browser {
    /// A headless Chromium whose window is `width` x `height` CSS pixels (1280 x 900: a laptop),
    /// driven by a chromedriver on a free loopback port.
    pub async fn start(width: u32, height: u32) -> Browser {
        Self::launch(width, height, None).await
    }

    /// A headless Chromium showing pages as a phone does: a `width` x `height` viewport (390 x 844:
    /// an iPhone), touch, the mobile viewport rules. A window cannot be made that narrow (Chromium
    /// keeps it at least 500 px wide), so this is chromedriver's device emulation.
    pub async fn phone(width: u32, height: u32) -> Browser {
        Self::launch(500, height, Some((width, height))).await
    }

    async fn launch(width: u32, height: u32, phone: Option<(u32, u32)>) -> Browser {
        let chromium = program("chromium");
        let chromedriver = program("chromedriver");
        let port = super::free_port();
        // chromedriver accepts local connections only unless told otherwise (`--allowed-ips`).
        let driver = Driver(
            Command::new(&chromedriver)
                .arg(format!("--port={port}"))
                .arg("--log-level=WARNING")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{}: {e} (install: {INSTALL})", chromedriver.display())),
        );
        let client = Self::connect(port, &chromium, (width, height), phone, &driver.0).await;
        let session = client.session_id().await.ok().flatten();
        Browser {
            client,
            port,
            session,
            _driver: driver,
        }
    }

    /// Opens the WebDriver session, retrying for at most 20 s while chromedriver starts.
    async fn connect(
        port: u16,
        chromium: &std::path::Path,
        (w, h): (u32, u32),
        phone: Option<(u32, u32)>,
        driver: &Child,
    ) -> Client {
        let mut caps = json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    format!("--window-size={w},{h}"),
                    // Containers give /dev/shm little room; a crash there would look like a page bug.
                    "--disable-dev-shm-usage",
                    // The page is on 127.0.0.1; no proxy from the environment may stand in between.
                    "--no-proxy-server",
                    "--no-first-run", "--disable-extensions", "--hide-scrollbars",
                ]
            }
        });
        if let Some((pw, ph)) = phone {
            caps["goog:chromeOptions"]["mobileEmulation"] = json!({
                "deviceMetrics": {"width": pw, "height": ph, "pixelRatio": 1.0, "touch": true, "mobile": true}
            });
        }
        let caps = match caps {
            Value::Object(map) => map,
            _ => unreachable!("a JSON object literal"),
        };
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut builder =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
            builder.capabilities(caps.clone());
            match builder.connect(&url).await {
                Ok(client) => return client,
                // Not listening yet: try again (the last error is reported at the deadline).
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!(
                    "no WebDriver session from chromedriver (pid {}) on port {port} within 20 s: {e}",
                    driver.id()
                ),
            }
        }
    }

    /// Clicks the element `css` selects (the test fails if there is none).
    pub async fn click(&self, css: &str) {
        let element = self.client.find(Locator::Css(css)).await;
        let element = element.unwrap_or_else(|e| panic!("no element {css}: {e}"));
        element
            .click()
            .await
            .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
    }

    /// Types `key` into the page's admin key field and presses its Use button.
    pub async fn enter_key(&self, key: &str) {
        let input = self.client.find(Locator::Id("admin-key")).await;
        let input = input.unwrap_or_else(|e| panic!("no admin key field: {e}"));
        input
            .send_keys(key)
            .await
            .unwrap_or_else(|e| panic!("typing the key: {e}"));
        self.click("#key-use").await;
    }

    /// Runs `script` (a function body: `return ...`) in the page and gives its value.
    pub async fn eval(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Polls `script` (a function body returning a boolean) every 100 ms until it is true; fails
    /// the test after `limit`, saying `what` it waited for and what the page showed.
    pub async fn wait_for(&self, limit: Duration, what: &str, script: &str) {
        let deadline = Instant::now() + limit;
        loop {
            // A script error while the page (re)loads counts as "not yet".
            if let Ok(Value::Bool(true)) = self.client.execute(script, vec![]).await {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "waited {limit:?} for {what}; the page showed:\n{}",
                    self.page_text().await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The page's visible text and its body classes (for failure messages).
    pub async fn page_text(&self) -> String {
        match self
            .client
            .execute(
                "return 'body class: ' + document.body.className + '\\n' + document.body.innerText;",
                vec![],
            )
            .await
        {
            Ok(Value::String(s)) => s,
            other => format!("(page text unavailable: {other:?})"),
        }
    }

    /// Saves a PNG of the whole page (the window grows to the page's height first, at most
    /// 4000 px) to `path`.
    pub async fn screenshot(&self, path: &std::path::Path) {
        let (w, _) = self.client.get_window_size().await.unwrap();
        let h = self
            .eval("return Math.ceil(document.documentElement.scrollHeight);")
            .await
            .as_u64()
            .unwrap_or(900)
            .clamp(600, 4000);
        // The window's frame (about 100 px even headless) is outside the page: the extra keeps the
        // bottom in view.
        self.client
            .set_window_size(w as u32, h as u32 + 200)
            .await
            .unwrap();
        let png = self.client.screenshot().await.unwrap();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    /// Ends the session (Chromium exits) and stops the driver.
    pub async fn close(mut self) {
        if self.client.clone().close().await.is_ok() {
            self.session = None;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A test that failed half-way still closes Chromium: the session is ended with a plain
        // blocking DELETE (Drop cannot await), then the driver is killed.
        if let Some(id) = self.session.take() {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                let req = format!(
                    "DELETE /session/{id} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\n\
                     Connection: close\r\n\r\n",
                    self.port
                );
                if s.write_all(req.as_bytes()).is_ok() {
                    let mut answer = Vec::new();
                    let _ = s.read_to_end(&mut answer);
                }
            }
        }
    }
}
