//! The TLS node of the load benchmark: a private CA made for the run (rcgen), a certificate it
//! signed for `127.0.0.1` and `localhost`, and a devnode serving HTTPS with it. snowgate trusts
//! the CA through `tls_ca_file` and checks the address; nginx through
//! `proxy_ssl_trusted_certificate`, checking the name `localhost` (it matches names, not
//! addresses).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{addr, free_port, pinned, procs, Bench, Proc};

/// The run's PEM files.
pub struct Certs {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Makes the CA and the node's certificate and key under `dir`.
pub fn certs(dir: &Path) -> Result<Certs, String> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let e = |e: rcgen::Error| e.to_string();
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Names of their own: with rcgen's one default name for both, OpenSSL (nginx) takes the
    // node's certificate for a self-signed one and refuses it.
    (ca.distinguished_name).push(DnType::CommonName, "snowgate load benchmark CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(e)?).map_err(e)?;
    let key = KeyPair::generate().map_err(e)?;
    let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let mut node = CertificateParams::new(names).map_err(e)?;
    node.distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = node.signed_by(&key, &ca).map_err(e)?;
    let certs = Certs {
        ca: dir.join("ca.pem"),
        cert: dir.join("node-cert.pem"),
        key: dir.join("node-key.pem"),
    };
    let write = |path: &Path, text: String| std::fs::write(path, text).map_err(|e| e.to_string());
    write(&certs.ca, ca.pem())?;
    write(&certs.cert, cert.pem())?;
    write(&certs.key, key.serialize_pem())?;
    Ok(certs)
}

impl Bench {
    /// A devnode serving HTTPS with `certs` (blocks slow, as the plain one's); its port.
    pub fn start_tls_devnode(&self, certs: &Certs) -> Result<(Proc, u16), String> {
        let port = free_port();
        let mut cmd = pinned(&self.pin.server, &self.snowgate);
        cmd.args(["devnode", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--block-interval", "60s"])
            .arg("--tls-cert")
            .arg(&certs.cert)
            .arg("--tls-key")
            .arg(&certs.key);
        let mut devnode = self.server("devnode-tls", cmd)?;
        procs::wait_listening(&mut devnode, addr(port), Duration::from_secs(20))?;
        Ok((devnode, port))
    }
}
