//! Reading a request body within its limits: at most `limits.body_bytes`, within
//! `limits.body_timeout`, paid for as it arrives (a [`Meter`]: the caller's quota, by size), and
//! within the room left for bodies on its connection (`limits.connection_body_bytes`, all its
//! HTTP/2 streams together), from its client address (`limits.address_body_bytes`, all its
//! connections together) and in the whole gateway (`limits.total_body_bytes`). A client that opens
//! many streams or connections and sends each a little of a large body waits for room instead of
//! making snowgate hold it all.
//!
//! Room is taken connection first, then address, then gateway, each waiting in arrival order
//! (tokio's semaphores are fair). A body waiting for the gateway's room therefore holds its
//! address's: one address's bodies take at most `address_body_bytes` of the gateway's room and of
//! its queue, so the bodies of other addresses are served beside them instead of behind them.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;

/// Why a request body could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    TooLarge,
    Timeout,
    /// The client broke off, or sent a malformed body.
    Broken,
    /// The [`Meter`] refused to pay for more of it (it knows why): reading stopped there.
    Refused,
}

/// Pays for a body's bytes as they arrive, before they take room; refusing stops the read.
pub trait Meter {
    /// `total` bytes of the body have arrived: `false` refuses them (the read stops).
    fn arrived(&mut self, total: u64) -> bool;
}

/// Bodies nobody pays for by size (an admin's, or with rate limiting off).
impl Meter for () {
    fn arrived(&mut self, _total: u64) -> bool {
        true
    }
}

/// The body room of each client address (`limits.address_body_bytes`), one per gateway
/// generation. An address has an entry only while one of its bodies holds or waits for room.
pub struct AddressRooms {
    bytes: usize,
    /// A body of at most this many bytes, on a connection of the address itself, takes none of
    /// the address's room: so many bodies at once from one address (its connections times their
    /// streams) stay within `bytes` anyway. The usual small call then never touches the shared
    /// table: measured on the cache-hit path, where it cost a few percent of a hit's CPU.
    small: usize,
    rooms: DashMap<IpAddr, Arc<Semaphore>>,
}

impl AddressRooms {
    /// Room for `bytes` of bodies per address, of which an address may hold at most
    /// `bodies_at_once` at a time on its own connections (`max_connections_per_ip` times the
    /// HTTP/2 streams of one connection).
    pub fn new(bytes: usize, bodies_at_once: usize) -> AddressRooms {
        AddressRooms {
            bytes,
            small: bytes / bodies_at_once.max(1),
            rooms: DashMap::new(),
        }
    }

    /// The room of `address` (made on first use).
    fn of(&self, address: IpAddr) -> Arc<Semaphore> {
        if let Some(room) = self.rooms.get(&address) {
            return room.clone();
        }
        let room = self
            .rooms
            .entry(address)
            .or_insert_with(|| Arc::new(Semaphore::new(self.bytes.min(Semaphore::MAX_PERMITS))));
        room.clone()
    }

    /// Lets go of `room`, `address`'s (its bytes given back): the entry goes with its last user.
    fn release(&self, address: IpAddr, room: Arc<Semaphore>) {
        drop(room);
        // Clones are made under the map's lock, so a count of one (the map's) is final.
        self.rooms
            .remove_if(&address, |_, room| Arc::strong_count(room) == 1);
    }

    /// Addresses holding or waiting for room now.
    pub fn tracked(&self) -> usize {
        self.rooms.len()
    }
}

/// One request's place in its address's room.
struct AddressRoom<'a> {
    rooms: &'a AddressRooms,
    address: IpAddr,
    /// The connection is the address's own (not a trusted proxy forwarding it): a body of at most
    /// `rooms.small` bytes takes none of the room.
    direct: bool,
    /// Taken on the first byte past `rooms.small` (on the first byte, when not `direct`).
    room: Option<Arc<Semaphore>>,
    /// The bytes taken from `room`.
    held: u32,
}

/// The body room of one request, held until its answer is made (the body's bytes live that long)
/// and given back on drop.
pub struct BodyRoom<'a> {
    conn: &'a Semaphore,
    address: Option<AddressRoom<'a>>,
    total: &'a Semaphore,
    held: u32,
}

impl<'a> BodyRoom<'a> {
    /// No room yet, to be taken from the connection's and the gateway's.
    pub fn new(conn: &'a Semaphore, total: &'a Semaphore) -> BodyRoom<'a> {
        BodyRoom {
            conn,
            address: None,
            total,
            held: 0,
        }
    }

    /// No room yet, to be taken from the connection's, `address`'s in `rooms`, and the gateway's.
    pub fn of_address(
        conn: &'a Semaphore,
        rooms: &'a AddressRooms,
        address: IpAddr,
        direct: bool,
        total: &'a Semaphore,
    ) -> BodyRoom<'a> {
        BodyRoom {
            address: Some(AddressRoom {
                rooms,
                address,
                direct,
                room: None,
                held: 0,
            }),
            ..BodyRoom::new(conn, total)
        }
    }

    /// Takes room for `n` more bytes, waiting for it while the connection, the address or the
    /// gateway is full. Cancel-safe: room is counted as held only once all are taken.
    async fn take(&mut self, n: usize) -> Result<(), BodyError> {
        let n = u32::try_from(n).map_err(|_| BodyError::TooLarge)?;
        if n == 0 {
            return Ok(());
        }
        let after = self.held.saturating_add(n);
        // What the address's room must hold once these bytes are in: all of the body's bytes,
        // unless the whole body is still small enough to need none.
        let address = match self.address.as_mut() {
            Some(a) if !(a.direct && a.room.is_none() && after as usize <= a.rooms.small) => {
                let room = a.room.get_or_insert_with(|| a.rooms.of(a.address)).clone();
                Some((room, after - a.held))
            }
            _ => None,
        };
        let conn = room(self.conn, n).await?;
        let from_address = match &address {
            Some((r, more)) => Some(room(r, *more).await?),
            None => None,
        };
        let total = room(self.total, n).await?;
        conn.forget();
        if let (Some(permit), Some(a)) = (from_address, self.address.as_mut()) {
            a.held = a.held.saturating_add(permit.num_permits() as u32);
            permit.forget();
        }
        total.forget();
        self.held = after;
        Ok(())
    }
}

/// `n` permits of `room`, at once when free (the common case takes no place in the wait queue).
async fn room(room: &Semaphore, n: u32) -> Result<tokio::sync::SemaphorePermit<'_>, BodyError> {
    match room.try_acquire_many(n) {
        Ok(permit) => Ok(permit),
        // Boxed: the wait is rare, and its state would make every read's future larger.
        Err(_) => Box::pin(room.acquire_many(n))
            .await
            .map_err(|_| BodyError::Broken),
    }
}

impl Drop for BodyRoom<'_> {
    fn drop(&mut self) {
        let held = self.held as usize;
        self.conn.add_permits(held);
        if let Some(AddressRoom {
            rooms,
            address,
            room: Some(room),
            held: from_address,
            ..
        }) = self.address.take()
        {
            room.add_permits(from_address as usize);
            rooms.release(address, room);
        }
        self.total.add_permits(held);
    }
}

/// Reads a whole body of at most `limit` bytes within `timeout`, paying `meter` for its bytes
/// and taking room for them as they arrive. Most bodies arrive with their headers: the timer is
/// armed only for one that has not.
pub async fn read<B>(
    body: B,
    limit: usize,
    timeout: Duration,
    room: &mut BodyRoom<'_>,
    meter: &mut impl Meter,
) -> Result<Bytes, BodyError>
where
    B: http_body::Body<Data = Bytes>,
{
    let read = collect(body, limit, room, meter);
    let mut read = std::pin::pin!(read);
    match std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
        Poll::Ready(read) => read,
        // The timer boxed: only a body still arriving needs one, and held inline it would make
        // every read's future (and the router's around it) larger.
        Poll::Pending => Box::pin(tokio::time::timeout(timeout, read))
            .await
            .unwrap_or(Err(BodyError::Timeout)),
    }
}

/// Reads a whole body of at most `limit` bytes, paying for it and taking room for it as it
/// arrives. A body that arrives in one piece (the usual case) is kept as it is, without a copy.
async fn collect<B>(
    body: B,
    limit: usize,
    room: &mut BodyRoom<'_>,
    meter: &mut impl Meter,
) -> Result<Bytes, BodyError>
where
    B: http_body::Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    if usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX) > limit {
        // A declared length over the limit is refused before a byte is read.
        return Err(BodyError::TooLarge);
    }
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err(BodyError::Broken);
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers: not part of the body
        };
        total = total.saturating_add(data.len());
        if total > limit {
            return Err(BodyError::TooLarge);
        }
        if !meter.arrived(total as u64) {
            return Err(BodyError::Refused);
        }
        room.take(data.len()).await?;
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            held => {
                if let Some(held) = held {
                    joined.reserve(held.len() + data.len());
                    joined.extend_from_slice(&held);
                }
                joined.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(joined)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};

    #[tokio::test]
    async fn room_is_held_while_the_body_lives_and_given_back() {
        let (conn, total) = (Semaphore::new(100), Semaphore::new(1000));
        {
            let mut room = BodyRoom::new(&conn, &total);
            let body = Full::new(Bytes::from_static(&[b'x'; 60]));
            let got = read(body, 80, Duration::from_secs(1), &mut room, &mut ()).await;
            assert_eq!(got.map(|b| b.len()), Ok(60));
            assert_eq!(
                (conn.available_permits(), total.available_permits()),
                (40, 940)
            );
        }
        assert_eq!(
            (conn.available_permits(), total.available_permits()),
            (100, 1000)
        );
    }

    #[tokio::test]
    async fn over_the_limit_or_late_is_refused() {
        let (conn, total) = (Semaphore::new(100), Semaphore::new(1000));
        let mut room = BodyRoom::new(&conn, &total);
        let body = Full::new(Bytes::from_static(&[b'x'; 81]));
        assert_eq!(
            read(body, 80, Duration::from_secs(1), &mut room, &mut ()).await,
            Err(BodyError::TooLarge)
        );
        let never = StreamBody::new(futures_util::stream::pending::<
            Result<http_body::Frame<Bytes>, std::convert::Infallible>,
        >());
        let late = read(never, 80, Duration::from_millis(20), &mut room, &mut ()).await;
        assert_eq!(late, Err(BodyError::Timeout));
    }

    /// Pays for `allowed` bytes, recording each total it was shown.
    struct Upto {
        allowed: u64,
        seen: Vec<u64>,
    }

    impl Meter for Upto {
        fn arrived(&mut self, total: u64) -> bool {
            self.seen.push(total);
            total <= self.allowed
        }
    }

    #[tokio::test]
    async fn a_body_without_a_length_is_paid_as_it_arrives_and_read_no_further_when_refused() {
        let (conn, total) = (Semaphore::new(1000), Semaphore::new(1000));
        let polled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = polled.clone();
        // Frames of 10 bytes for ever, as a client streaming a body without a length.
        let frames = futures_util::stream::repeat_with(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, std::convert::Infallible>(http_body::Frame::data(Bytes::from_static(
                &[b' '; 10],
            )))
        });
        let body = StreamBody::new(frames);
        let mut meter = Upto {
            allowed: 35,
            seen: Vec::new(),
        };
        {
            let mut room = BodyRoom::new(&conn, &total);
            let got = read(body, 500, Duration::from_secs(5), &mut room, &mut meter).await;
            assert_eq!(got, Err(BodyError::Refused));
            // The refused frame took no room.
            assert_eq!(total.available_permits(), 970);
        }
        assert_eq!(meter.seen, [10, 20, 30, 40]);
        assert_eq!(polled.load(std::sync::atomic::Ordering::Relaxed), 4);
        assert_eq!(total.available_permits(), 1000);
    }

    #[tokio::test]
    async fn one_address_holds_at_most_its_room_and_others_pass_it() {
        let (total, rooms) = (Semaphore::new(100), AddressRooms::new(30, 1_000));
        let conns: Vec<Semaphore> = (0..4).map(|_| Semaphore::new(100)).collect();
        let a: IpAddr = [192, 0, 2, 1].into();
        let b: IpAddr = [192, 0, 2, 2].into();
        let body = |n: usize| Full::new(Bytes::from(vec![b' '; n]));
        let limit = Duration::from_secs(5);
        let mut first = BodyRoom::of_address(&conns[0], &rooms, a, true, &total);
        let got = read(body(25), 100, limit, &mut first, &mut ()).await;
        assert_eq!(got.map(|b| b.len()), Ok(25));
        // A second body of the same address, on another connection, waits for the address's
        // room, not the gateway's: it takes none of the gateway's meanwhile.
        let mut second = BodyRoom::of_address(&conns[1], &rooms, a, true, &total);
        let mut free = ();
        let mut waiting = Box::pin(read(body(25), 100, limit, &mut second, &mut free));
        assert!(futures_util::FutureExt::now_or_never(waiting.as_mut()).is_none());
        assert_eq!(total.available_permits(), 75);
        // Another address is served at once.
        let mut other = BodyRoom::of_address(&conns[2], &rooms, b, true, &total);
        let got = read(body(25), 100, limit, &mut other, &mut ()).await;
        assert_eq!(got.map(|b| b.len()), Ok(25));
        assert_eq!(total.available_permits(), 50);
        assert_eq!(rooms.tracked(), 2);
        // The first body's answer is made: the second gets its address's room.
        drop(first);
        assert_eq!(waiting.await.map(|b| b.len()), Ok(25));
        drop(second);
        drop(other);
        assert_eq!(total.available_permits(), 100);
        assert_eq!(rooms.tracked(), 0, "an address with no body keeps no entry");
    }

    #[tokio::test]
    async fn small_bodies_on_the_addresss_own_connections_take_none_of_its_room() {
        // 30 bytes per address, 3 bodies at once: a body of at most 10 bytes needs no room.
        let (total, rooms) = (Semaphore::new(100), AddressRooms::new(30, 3));
        let conn = Semaphore::new(100);
        let a: IpAddr = [192, 0, 2, 1].into();
        let limit = Duration::from_secs(5);
        let frames = |sizes: &[usize]| {
            let frames: Vec<Result<http_body::Frame<Bytes>, std::convert::Infallible>> = sizes
                .iter()
                .map(|n| Ok(http_body::Frame::data(Bytes::from(vec![b' '; *n]))))
                .collect();
            http_body_util::StreamBody::new(futures_util::stream::iter(frames))
        };
        let mut small = BodyRoom::of_address(&conn, &rooms, a, true, &total);
        let got = read(frames(&[4, 6]), 100, limit, &mut small, &mut ()).await;
        assert_eq!(got.map(|b| b.len()), Ok(10));
        assert_eq!(rooms.tracked(), 0, "a small body takes no entry");
        // A body that grows past the bound takes room for all of its bytes, the first ones too.
        let mut large = BodyRoom::of_address(&conn, &rooms, a, true, &total);
        let got = read(frames(&[8, 8, 8]), 100, limit, &mut large, &mut ()).await;
        assert_eq!(got.map(|b| b.len()), Ok(24));
        let room = rooms.of(a);
        assert_eq!(room.available_permits(), 30 - 24);
        drop(room);
        // Through a trusted proxy even a small body is counted.
        let mut forwarded = BodyRoom::of_address(&conn, &rooms, a, false, &total);
        let got = read(frames(&[4]), 100, limit, &mut forwarded, &mut ()).await;
        assert_eq!(got.map(|b| b.len()), Ok(4));
        assert_eq!(rooms.of(a).available_permits(), 30 - 28);
        drop((small, large, forwarded));
        assert_eq!(rooms.tracked(), 0);
        assert_eq!(
            (total.available_permits(), conn.available_permits()),
            (100, 100)
        );
    }
}
