//! The one handle through which the request path reaches the clients' quotas: who a request is
//! charged to ([`Quota::identify`]), what its body costs as it is read ([`Quota::body`]), what a
//! call costs ([`Quota::charge`], by the rate-limit layer), and what a call snowgate refuses
//! itself costs ([`Quota::charge_refused`], by the decoding layer). Each rule lives here once: an
//! admin caller is never charged, and with rate limiting off nothing is (every method then says
//! yes without a lookup).
//!
//! The layers hold a clone of this handle (an `Option<Arc>`), never the limiter itself; the status
//! page reads the limiter through [`Quota::limiter`].

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::Either;
use http::HeaderMap;
use tower::{Layer, Service};

use super::usage::Usage;
use super::{Admission, Limiter, OverQuota, QuotaState};
use crate::call::{Answer, Caller, ClientId, HitProbe, RpcCall, Surcharge};
use crate::error::ProxyError;

/// The clients' quotas as the request path reaches them (see the module doc).
#[derive(Clone, Default)]
pub struct Quota {
    /// `None`: rate limiting is off.
    limiter: Option<Arc<Limiter>>,
    /// Where the calls of key clients are counted once admitted (`usage`).
    usage: Usage,
}

/// A hedge or a seconding costs its method's cost again, charged as a refused call is (without
/// waiting: from the lease, else at this instance's share and owed to Redis); an admin caller, or
/// rate limiting off, is not charged.
impl Surcharge for Quota {
    fn surcharge(&self, call: &RpcCall) -> bool {
        match self.charging(&call.caller) {
            Some(l) => {
                let units = l.units(call.spec.cost, false);
                l.charge_now(&call.caller.client, units).is_ok()
            }
            None => true,
        }
    }
}

impl Quota {
    /// The quotas kept by `limiter` (`None`: rate limiting is off).
    pub fn new(limiter: Option<Arc<Limiter>>) -> Quota {
        Quota {
            limiter,
            usage: Usage::default(),
        }
    }

    /// The same quotas, counting the calls they admit for key clients into `usage`.
    pub fn with_usage(mut self, usage: Usage) -> Quota {
        self.usage = usage;
        self
    }

    /// Where key clients' calls are counted (`GET /snowgate/usage`, the status page).
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// The limiter in force, for the status page and the rate-limit layer's place in the stack.
    pub fn limiter(&self) -> Option<&Arc<Limiter>> {
        self.limiter.as_ref()
    }

    /// Who a request from `peer` with `headers` is charged to: a key it presents, else its
    /// address (behind a trusted proxy, the client's it forwards; an IPv6 /64). With rate
    /// limiting off, the peer's address.
    pub fn identify(&self, peer: IpAddr, headers: &HeaderMap) -> ClientId {
        match &self.limiter {
            Some(l) => l.identify(peer, headers),
            None => ClientId::Ip(peer),
        }
    }

    /// Where `client` stands now (`None`: rate limiting is off, or a key not limited).
    pub fn state(&self, client: &ClientId) -> Option<QuotaState> {
        self.limiter.as_ref()?.state(client)
    }

    /// Adds the RateLimit header fields of `client` (`None`: an admin, not charged) to an answer's
    /// `headers`. Nothing with rate limiting off.
    pub fn stamp(&self, client: Option<&ClientId>, headers: &mut HeaderMap) {
        if let Some(mut state) = client.and_then(|c| self.state(c)) {
            // A refusal's `t` is its `Retry-After` (the draft: the same point in time).
            let retry = headers
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if let Some(secs) = retry {
                state.refused_for = Some(std::time::Duration::from_secs(secs));
            }
            state.stamp(headers);
        }
    }

    /// The limiter that charges `caller` (`None`: an admin, or rate limiting off).
    fn charging(&self, caller: &Caller) -> Option<&Arc<Limiter>> {
        self.limiter.as_ref().filter(|_| !caller.admin)
    }

    /// Decides a call costing `cost` units of its method (`hit`: answered from the cache, at the
    /// cached price) for `caller`.
    pub fn charge(&self, caller: &Caller, cost: u32, hit: bool) -> Admission {
        match self.charging(caller) {
            Some(l) => {
                let units = l.units(cost, hit);
                let admission = l.admit(&caller.client, units);
                // A key's call counts for its usage once admitted (`usage`).
                self.usage
                    .on_admit(l.key_name(&caller.client), units, admission)
            }
            None => Admission::Decided(Ok(())),
        }
    }

    /// Charges a call snowgate refused itself (`rate_limit.refused_cost`) without waiting; over
    /// quota, the refusal to answer instead.
    pub fn charge_refused(&self, caller: &Caller) -> Result<(), ProxyError> {
        match self.charging(caller) {
            Some(l) => l.charge_refused(&caller.client),
            None => Ok(()),
        }
    }

    /// The charge for `caller`'s request body by its size (`None`: not charged).
    pub fn body<'a>(&'a self, caller: &'a Caller) -> Option<BodyCharge<'a>> {
        Some(BodyCharge {
            limiter: self.charging(caller)?,
            client: &caller.client,
            charged: 0,
            refusal: None,
        })
    }
}

/// One request body's charge by its size ([`Limiter::body_units`]): before a byte is read, a
/// caller known to be over its quota is refused ([`BodyCharge::before`]); a declared length is
/// charged up front, up to the caller's burst ([`BodyCharge::declared`], which may wait on Redis
/// as a call does); the rest as the bytes arrive, without waiting ([`BodyCharge::arrived`]).
pub struct BodyCharge<'a> {
    limiter: &'a Arc<Limiter>,
    client: &'a ClientId,
    /// Units charged so far.
    charged: u32,
    /// What the last refusal of [`BodyCharge::arrived`] was.
    refusal: Option<ProxyError>,
}

impl BodyCharge<'_> {
    /// Whether the caller is known to be over its quota (see [`Limiter::before_body`]).
    pub fn before(&self) -> Result<(), OverQuota> {
        self.limiter.before_body(self.client)
    }

    /// Charges a declared length of `declared` bytes, at most the caller's burst at once.
    pub async fn declared(&mut self, declared: u64) -> Result<(), ProxyError> {
        let units = self
            .limiter
            .body_units(declared)
            .min(self.limiter.burst_units(self.client));
        if units == 0 {
            return Ok(());
        }
        match self.limiter.admit(self.client, units) {
            Admission::Decided(verdict) => verdict?,
            Admission::Pending(decision) => decision.await?,
        }
        self.charged = units;
        Ok(())
    }

    /// Charges what `total` bytes cost beyond what was charged already, without waiting; `false`
    /// (and the refusal kept for [`BodyCharge::refusal`]) when the quota refuses.
    pub fn arrived(&mut self, total: u64) -> bool {
        let due = self.limiter.body_units(total);
        if due <= self.charged {
            return true;
        }
        match self.limiter.charge_now(self.client, due - self.charged) {
            Ok(()) => {
                self.charged = due;
                true
            }
            Err(e) => {
                self.refusal = Some(e);
                false
            }
        }
    }

    /// Why [`BodyCharge::arrived`] refused, once.
    pub fn refusal(&mut self) -> Option<ProxyError> {
        self.refusal.take()
    }
}

/// Charges each call against its client's quota before it reaches the cache.
#[derive(Clone)]
pub struct RateLimitLayer {
    quota: Quota,
    cache: Option<Arc<dyn HitProbe>>,
}

impl RateLimitLayer {
    /// The layer over `quota`, pricing hits by what `cache` would answer (`None`: rate limiting
    /// is off, and the stack has no such layer).
    pub fn new(quota: &Quota, cache: Option<Arc<dyn HitProbe>>) -> Option<RateLimitLayer> {
        quota.limiter.as_ref()?;
        Some(RateLimitLayer {
            quota: quota.clone(),
            cache,
        })
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            quota: self.quota.clone(),
            cache: self.cache.clone(),
        }
    }
}

/// The service of [`RateLimitLayer`].
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    quota: Quota,
    cache: Option<Arc<dyn HitProbe>>,
}

impl<S> Service<RpcCall> for RateLimit<S>
where
    S: Service<RpcCall, Response = Answer, Error = ProxyError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = ProxyError;
    /// Refused at once; decided here, the inner call's own future (no allocation); or, waiting
    /// on Redis's decision first, boxed.
    type Future = Either<
        std::future::Ready<Result<Answer, ProxyError>>,
        Either<S::Future, Pin<Box<dyn Future<Output = Result<Answer, ProxyError>> + Send>>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ProxyError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: RpcCall) -> Self::Future {
        if !call.caller.admin {
            // The cache's decision stays on the call: the cache answers by the one priced here.
            let hit = self.cache.as_ref().is_some_and(|c| c.would_hit(&mut call));
            match self.quota.charge(&call.caller, call.spec.cost, hit) {
                Admission::Decided(Ok(())) => {}
                Admission::Decided(Err(e)) => return Either::Left(std::future::ready(Err(e))),
                Admission::Pending(decision) => {
                    // Redis decides first: the future takes the instance that was polled ready.
                    let clone = self.inner.clone();
                    let mut inner = std::mem::replace(&mut self.inner, clone);
                    let redis = call.caller.trace.redis("quota");
                    return Either::Right(Either::Right(Box::pin(async move {
                        let decided = decision.await;
                        drop(redis);
                        decided?;
                        inner.call(call).await
                    })));
                }
            }
        }
        Either::Right(Either::Left(self.inner.call(call)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RateLimitConfig;
    use crate::metrics::Metrics;

    fn caller(admin: bool, ip: [u8; 4]) -> Caller {
        let ip = IpAddr::from(ip);
        Caller {
            admin,
            pin: None,
            ip,
            client: ClientId::Ip(ip),
            request_id: None,
            trace: Default::default(),
        }
    }

    fn decided(a: Admission) -> Result<(), ProxyError> {
        match a {
            Admission::Decided(v) => v,
            Admission::Pending(_) => panic!("local quotas decide at once"),
        }
    }

    /// A burst of two calls of cost 1, refilled at a tenth of one a second: spent by two calls, and
    /// never refilled in time to change a verdict here, however slow the machine.
    fn tight() -> Quota {
        let cfg = RateLimitConfig {
            enabled: true,
            requests_per_second: 0,
            burst: 2,
            refused_cost: 1,
            cached_cost_factor: 0.5,
            body_bytes_per_unit: 1024,
            ..RateLimitConfig::default()
        };
        Quota::new(Some(Limiter::new(&cfg, &Metrics::new())))
    }

    #[test]
    fn each_rule_is_the_handles_own() {
        let quota = tight();
        let (client, admin) = (caller(false, [192, 0, 2, 1]), caller(true, [192, 0, 2, 1]));
        // Calls, hits at their own price, refused calls and bodies draw on one quota.
        assert!(decided(quota.charge(&client, 1, false)).is_ok());
        assert!(decided(quota.charge(&client, 1, true)).is_ok());
        assert!(quota
            .charge_refused(&client)
            .is_err_and(|e| matches!(e, ProxyError::RateLimited { .. })));
        let mut body = quota.body(&client).expect("a client's body is charged");
        assert!(body.before().is_ok(), "a hit's half unit is still there");
        assert!(decided(quota.charge(&client, 1, true)).is_ok());
        assert!(quota.charge_refused(&client).is_err());
        assert!(
            body.before().is_err(),
            "refused: known over quota before its body"
        );
        assert!(!body.arrived(4096));
        assert!(body.refusal().is_some() && body.refusal().is_none());
        // An admin is charged nothing, by any of them.
        assert!(decided(quota.charge(&admin, 1000, false)).is_ok());
        assert!(quota.charge_refused(&admin).is_ok());
        assert!(quota.body(&admin).is_none());
        // Another address has its own quota.
        let other = caller(false, [192, 0, 2, 2]);
        assert!(decided(quota.charge(&other, 1, false)).is_ok());
    }

    #[tokio::test]
    async fn a_declared_body_is_charged_up_front_up_to_the_burst_and_the_rest_as_it_arrives() {
        let quota = tight();
        let client = caller(false, [192, 0, 2, 9]);
        let mut body = quota.body(&client).expect("charged");
        assert!(body.before().is_ok());
        // 1023 bytes cost nothing; 64 KiB would cost 64 units, but one charge takes at most the
        // burst (2): it passes, and the rest is due as the bytes arrive.
        body.declared(1023).await.expect("free");
        body.declared(64 * 1024).await.expect("the burst, no more");
        assert!(body.arrived(2 * 1024), "already paid for");
        assert!(!body.arrived(3 * 1024), "the third unit is over the quota");
        assert!(matches!(
            body.refusal(),
            Some(ProxyError::RateLimited { .. })
        ));
    }

    #[test]
    fn with_rate_limiting_off_nothing_is_charged_and_the_client_is_its_peer() {
        let quota = Quota::new(None);
        let client = caller(false, [192, 0, 2, 1]);
        assert!(quota.limiter().is_none());
        assert!(decided(quota.charge(&client, u32::MAX, false)).is_ok());
        assert!(quota.charge_refused(&client).is_ok());
        assert!(quota.body(&client).is_none());
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-forwarded-for",
            http::HeaderValue::from_static("203.0.113.9"),
        );
        let peer = IpAddr::from([198, 51, 100, 1]);
        assert_eq!(quota.identify(peer, &headers), ClientId::Ip(peer));
    }
}
