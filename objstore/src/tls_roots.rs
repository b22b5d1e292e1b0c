//! The TLS roots of remote clients: Mozilla's root certificates, compiled
//! in (`webpki-root-certs`), added to the roots of the machine that runs
//! packfs (its CA bundle, `SSL_CERT_FILE`, `SSL_CERT_DIR`).
//!
//! Why both: the machine's store alone fails where there is none at the
//! paths the verifier knows (a minimal container, an empty root, a
//! distribution that keeps its bundle elsewhere), and with no root at all
//! the HTTP client cannot even be built, so plain `http://` fails too. The
//! bundled roots alone would ignore a site's own CA (an in-house S3
//! endpoint), which sites install into the system store. Neither depends
//! on the paths of the machine packfs was built on.

use object_store::{Certificate, ClientOptions};

/// `options` with every bundled root added.
pub(crate) fn with_bundled_roots(options: ClientOptions) -> ClientOptions {
    webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .filter_map(|der| Certificate::from_der(der.as_ref()).ok())
        .fold(options, ClientOptions::with_root_certificate)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_bundled_root_parses() {
        let roots = webpki_root_certs::TLS_SERVER_ROOT_CERTS;
        assert!(roots.len() > 100, "{} roots", roots.len());
        for der in roots {
            object_store::Certificate::from_der(der.as_ref()).unwrap();
        }
    }
}
