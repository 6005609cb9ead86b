//! Reading a request body within its limits: at most `limits.body_bytes`, within
//! `limits.body_timeout`, and within the room left for bodies on its connection
//! (`limits.connection_body_bytes`, all its HTTP/2 streams together) and in the whole gateway
//! (`limits.total_body_bytes`). A client that opens many streams and sends each a little of a
//! large body waits for room instead of making snowgate hold it all.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;

/// Why a request body could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    TooLarge,
    Timeout,
    /// The client broke off, or sent a malformed body.
    Broken,
}

/// The body room of one request, held until its answer is made (the body's bytes live that long)
/// and given back on drop.
pub struct BodyRoom<'a> {
    conn: &'a Semaphore,
    total: &'a Semaphore,
    held: u32,
}

impl<'a> BodyRoom<'a> {
    /// No room yet, to be taken from the connection's and the gateway's.
    pub fn new(conn: &'a Semaphore, total: &'a Semaphore) -> BodyRoom<'a> {
        BodyRoom {
            conn,
            total,
            held: 0,
        }
    }

    /// Takes room for `n` more bytes, waiting for it while the connection or the gateway is full.
    /// Cancel-safe: room is counted as held only once both are taken.
    async fn take(&mut self, n: usize) -> Result<(), BodyError> {
        let n = u32::try_from(n).map_err(|_| BodyError::TooLarge)?;
        if n == 0 {
            return Ok(());
        }
        let conn = room(self.conn, n).await?;
        let total = room(self.total, n).await?;
        conn.forget();
        total.forget();
        self.held = self.held.saturating_add(n);
        Ok(())
    }
}

/// `n` permits of `room`, at once when free (the common case takes no place in the wait queue).
async fn room(room: &Semaphore, n: u32) -> Result<tokio::sync::SemaphorePermit<'_>, BodyError> {
    match room.try_acquire_many(n) {
        Ok(permit) => Ok(permit),
        Err(_) => room.acquire_many(n).await.map_err(|_| BodyError::Broken),
    }
}

impl Drop for BodyRoom<'_> {
    fn drop(&mut self) {
        self.conn.add_permits(self.held as usize);
        self.total.add_permits(self.held as usize);
    }
}

/// Reads a whole body of at most `limit` bytes within `timeout`, taking room for it as it
/// arrives. Most bodies arrive with their headers: the timer is armed only for one that has not.
pub async fn read<B>(
    body: B,
    limit: usize,
    timeout: Duration,
    room: &mut BodyRoom<'_>,
) -> Result<Bytes, BodyError>
where
    B: http_body::Body<Data = Bytes>,
{
    let read = collect(body, limit, room);
    let mut read = std::pin::pin!(read);
    match std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
        Poll::Ready(read) => read,
        Poll::Pending => tokio::time::timeout(timeout, read)
            .await
            .unwrap_or(Err(BodyError::Timeout)),
    }
}

/// Reads a whole body of at most `limit` bytes, taking room for it as it arrives. A body that
/// arrives in one piece (the usual case) is kept as it is, without a copy.
async fn collect<B>(body: B, limit: usize, room: &mut BodyRoom<'_>) -> Result<Bytes, BodyError>
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
            let got = read(body, 80, Duration::from_secs(1), &mut room).await;
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
            read(body, 80, Duration::from_secs(1), &mut room).await,
            Err(BodyError::TooLarge)
        );
        let never = StreamBody::new(futures_util::stream::pending::<
            Result<http_body::Frame<Bytes>, std::convert::Infallible>,
        >());
        let late = read(never, 80, Duration::from_millis(20), &mut room).await;
        assert_eq!(late, Err(BodyError::Timeout));
    }
}
