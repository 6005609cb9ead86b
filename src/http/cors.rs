//! CORS as a node answers it ([`crate::jsonrpc::http::Cors`], the rules the devnode uses too),
//! with the request headers snowgate's own clients send allowed as well (`Authorization` for
//! keys, `X-Snowgate-Upstream` for admins), and the quota's answer headers exposed to a page's
//! script (`RateLimit`, `RateLimit-Policy`, `Retry-After`).
//!
//! Above drain and routing: a preflight is answered here and never routed (as rs/cors answers
//! it before a node's router), and every other answer, a 404 included, gets `Vary: Origin`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::header::ACCESS_CONTROL_EXPOSE_HEADERS;
use http::{HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service};

use crate::jsonrpc::http::Cors as Rules;

/// The node's request headers and snowgate's.
pub const GATEWAY_HEADERS: &[&str] = &[
    "Origin",
    "Accept",
    "Content-Type",
    "X-Requested-With",
    "Authorization",
    "X-Api-Key",
    "Rltoken",
    "X-Snowgate-Upstream",
];

/// Answer headers beyond the safelisted ones that a page's script may read: where its quota
/// stands, and how long to wait.
static EXPOSED: HeaderValue = HeaderValue::from_static("RateLimit, RateLimit-Policy, Retry-After");

/// Answers preflights and decorates answers with the gateway's CORS rules.
#[derive(Clone, Copy)]
pub struct CorsLayer {
    rules: Rules,
}

impl CorsLayer {
    pub fn new() -> CorsLayer {
        CorsLayer {
            rules: Rules::with_headers(GATEWAY_HEADERS),
        }
    }
}

impl Default for CorsLayer {
    fn default() -> Self {
        CorsLayer::new()
    }
}

impl<S> Layer<S> for CorsLayer {
    type Service = Cors<S>;

    fn layer(&self, inner: S) -> Cors<S> {
        Cors {
            inner,
            rules: self.rules,
        }
    }
}

/// See the module doc.
#[derive(Clone)]
pub struct Cors<S> {
    inner: S,
    rules: Rules,
}

impl<S, B, ResBody> Service<Request<B>> for Cors<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = CorsFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if let Some(headers) = self.rules.preflight(req.method(), req.headers()) {
            let mut r = Response::new(ResBody::default());
            *r.status_mut() = StatusCode::OK;
            *r.headers_mut() = headers;
            return CorsFuture::Preflight {
                answer: Some(Box::new(r)),
            };
        }
        let allowed = self.rules.allows(req.method(), req.headers());
        CorsFuture::Routed {
            inner: self.inner.call(req),
            rules: self.rules,
            allowed,
        }
    }
}

pin_project_lite::pin_project! {
    /// A preflight's answer, or the routed answer being decorated.
    #[project = CorsProj]
    pub enum CorsFuture<F, ResBody> {
        // Boxed: preflights are rare, and an answer held inline would make this future, and every
        // future around it, as large as a response, copied at every layer on every request.
        Preflight { answer: Option<Box<Response<ResBody>>> },
        Routed { #[pin] inner: F, rules: Rules, allowed: bool },
    }
}

impl<F, ResBody, E> Future for CorsFuture<F, ResBody>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = Result<Response<ResBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            CorsProj::Preflight { answer } => match answer.take() {
                Some(r) => Poll::Ready(Ok(*r)),
                None => Poll::Pending, // polled after completion: never again ready
            },
            CorsProj::Routed {
                inner,
                rules,
                allowed,
            } => {
                let mut r = std::task::ready!(inner.poll(cx))?;
                rules.decorate(r.headers_mut(), *allowed);
                if *allowed {
                    // A web page may read where its quota stands, and how long to wait.
                    r.headers_mut()
                        .insert(ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSED.clone());
                }
                Poll::Ready(Ok(r))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderValue, Method};
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tower::ServiceExt;

    fn counting() -> (
        Arc<AtomicUsize>,
        impl Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone,
    ) {
        let routed = Arc::new(AtomicUsize::new(0));
        let seen = routed.clone();
        let inner = tower::service_fn(move |_req: Request<()>| {
            seen.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, Infallible>(Response::new(String::from("routed"))) }
        });
        (routed, inner)
    }

    fn request(method: Method, headers: &[(&'static str, &'static str)]) -> Request<()> {
        let mut req = Request::new(());
        *req.method_mut() = method;
        for (k, v) in headers {
            req.headers_mut().insert(*k, HeaderValue::from_static(v));
        }
        req
    }

    #[tokio::test]
    async fn a_preflight_ends_here_for_any_method_case() {
        let (routed, inner) = counting();
        let cors = CorsLayer::new().layer(inner);
        for asked in ["post", "POST", "GET", "options"] {
            let req = request(
                Method::OPTIONS,
                &[
                    ("origin", "https://wallet.example"),
                    ("access-control-request-method", asked),
                    (
                        "access-control-request-headers",
                        "authorization, content-type",
                    ),
                ],
            );
            let r = cors
                .clone()
                .oneshot(req)
                .await
                .unwrap_or_else(|e| match e {});
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.headers()["access-control-allow-origin"], "*", "{asked}");
            assert_eq!(
                r.headers()["access-control-allow-methods"],
                asked.to_ascii_uppercase()
            );
            assert!(r.body().is_empty());
        }
        assert_eq!(routed.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn substrings_of_the_method_list_are_not_methods() {
        let (_, inner) = counting();
        let req = request(
            Method::OPTIONS,
            &[
                ("origin", "https://wallet.example"),
                ("access-control-request-method", "ET"),
            ],
        );
        let r = CorsLayer::new()
            .layer(inner)
            .oneshot(req)
            .await
            .unwrap_or_else(|e| match e {});
        assert!(r.headers().get("access-control-allow-origin").is_none());
    }

    #[tokio::test]
    async fn actual_answers_get_allow_headers_only_for_allowed_methods() {
        for (method, allowed) in [
            (Method::POST, true),
            (Method::PUT, false),
            (Method::DELETE, false),
        ] {
            let (routed, inner) = counting();
            let req = request(method.clone(), &[("origin", "https://wallet.example")]);
            let r = CorsLayer::new()
                .layer(inner)
                .oneshot(req)
                .await
                .unwrap_or_else(|e| match e {});
            assert_eq!(routed.load(Ordering::Relaxed), 1);
            assert_eq!(r.body(), "routed");
            assert_eq!(r.headers()["vary"], "Origin");
            assert_eq!(
                r.headers().contains_key("access-control-allow-origin"),
                allowed,
                "{method}"
            );
            if allowed {
                let exposed = &r.headers()["access-control-expose-headers"];
                assert_eq!(exposed, "RateLimit, RateLimit-Policy, Retry-After");
            }
        }
    }
}
