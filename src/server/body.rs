//! Response bodies handed to the connection in pieces.
//!
//! A review's answer goes to HTTP/2 in pieces small enough to be copied into
//! the connection's write buffer ([`Buffered::review`]):
//!
//! The h2 crate writes a DATA frame of 1 KiB or more on its own (256 bytes
//! or more on a stream offering vectored writes; the webhook listener's
//! streams do not, [`super::connections::Tracked`]): it flushes everything
//! buffered before it and sends the frame separately, so each such response
//! costs a TLS record and a write of its own (measured: one `writev` per
//! `/mutate` answer, against one per fifteen smaller answers, about 4 µs of
//! kernel time per review). Smaller frames are copied into the buffer and
//! go out together with the other streams' frames; each frame costs h2
//! about 2,000 instructions, so the pieces are as large as that allows.
//! HTTP/1.1 copies whole bodies into its write buffer and gets them in one
//! piece.
//!
//! A review's answer over 16 KiB goes to HTTP/1.1 in pieces too. On either
//! protocol the answer holds the review's share of the body budget
//! ([`super::budget`]) until the body is dropped, after its last piece: it
//! echoes the review's uid, so it can be as large as the review, and a
//! client that does not read it must not hold memory nothing counts.
//!
//! An operations answer (`/api/denials` up to 1 MiB, `/metrics`, the
//! dashboard's script) is handed over in pieces of [`SHARED_PIECE`] bytes,
//! each a view of the one rendered answer ([`Buffered::shared`]). actix's
//! HTTP/1.1 dispatcher copies a piece into the connection's write buffer
//! only while that buffer holds less than 32 KiB, so a client that does not
//! read holds about 48 KiB of its answer, not a copy of all of it; the
//! answer itself is shared by every connection it is sent on.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use actix_web::body::{BodySize, MessageBody};
use actix_web::web::Bytes;

use super::budget::Reservation;

/// Below h2's threshold for writing a DATA frame on its own (1 KiB on a
/// stream without vectored writes).
const PIECE: usize = 1023;

/// The piece of an operations answer: half of actix's HTTP/1.1 write
/// buffer.
pub const SHARED_PIECE: usize = 16 << 10;

/// A complete body, yielded in pieces.
pub struct Buffered {
    rest: Bytes,
    piece: usize,
    /// Budget bytes held until the body is dropped (the reservation gives
    /// them back then).
    _held: Option<Reservation>,
    /// When the client must have taken all but the last piece, and the
    /// time it was given, if any.
    deadline: Option<(Instant, Duration)>,
}

/// The error of a body whose client did not take it in time
/// ([`Buffered::taken_within`]): the connection is closed, which drops the
/// body and gives its budget back.
#[derive(Debug, thiserror::Error)]
#[error("the client did not take its answer within {0:?}; connection closed")]
pub struct TakenTooSlowly(Duration);

impl Buffered {
    /// A review's answer `bytes`, in pieces of at most [`PIECE`] bytes.
    pub fn review(bytes: Vec<u8>) -> Self {
        Buffered {
            rest: Bytes::from(bytes),
            piece: PIECE,
            _held: None,
            deadline: None,
        }
    }

    /// `bytes`, in pieces of at most [`SHARED_PIECE`] bytes, each a view of
    /// `bytes` (no copy).
    pub fn shared(bytes: Bytes) -> Self {
        Buffered {
            rest: bytes,
            piece: SHARED_PIECE,
            _held: None,
            deadline: None,
        }
    }

    /// The same body, holding `held` until the body is dropped, so that an
    /// answer its client does not read stays counted in the body budget:
    /// HTTP/1.1 drops it once the last piece is in the connection's write
    /// buffer, HTTP/2 once the last piece has been handed to its stream,
    /// which may have waited for the client's window; the pieces are views
    /// of the one answer, so the last one keeps all of it in memory.
    pub fn holding(mut self, held: Reservation) -> Self {
        self._held = Some(held);
        self
    }

    /// The same answer of the webhook listener, failing when a piece is
    /// asked for after `time` (from now) with more still to come: HTTP/1.1
    /// then ends the connection, which `accept` resets and counts as
    /// `write_stalled`.
    ///
    /// A client that reads a little every few seconds makes progress, so
    /// the write-stall timeout never ends it; without this it would hold
    /// the answer, and its share of the body budget, as long as it likes.
    pub fn taken_within(mut self, time: Duration) -> Self {
        self.deadline = Some((Instant::now() + time, time));
        self
    }
}

impl MessageBody for Buffered {
    type Error = TakenTooSlowly;

    fn size(&self) -> BodySize {
        BodySize::Sized(self.rest.len() as u64)
    }

    fn poll_next(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        if self.rest.is_empty() {
            return Poll::Ready(None);
        }
        if let Some((deadline, time)) = self.deadline
            && Instant::now() >= deadline
        {
            // The connection counts and resets itself (`accept`).
            return Poll::Ready(Some(Err(TakenTooSlowly(time))));
        }
        let take = self.rest.len().min(self.piece);
        Poll::Ready(Some(Ok(self.rest.split_to(take))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn pieces_stay_below_the_threshold_and_add_up_to_the_body() {
        let bytes: Vec<u8> = (0..2500u32).map(|i| (i % 251) as u8).collect();
        let mut body = Box::pin(Buffered::review(bytes.clone()));
        assert!(matches!(body.size(), BodySize::Sized(2500)));
        let mut joined = Vec::new();
        let mut pieces = 0;
        while let Some(piece) = std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await {
            let piece = piece.expect("no deadline");
            assert!(!piece.is_empty() && piece.len() <= PIECE, "{}", piece.len());
            joined.extend_from_slice(&piece);
            pieces += 1;
        }
        assert_eq!(joined, bytes);
        assert_eq!(pieces, 2500usize.div_ceil(PIECE));
    }

    #[actix_web::test]
    async fn the_budget_is_held_until_the_body_is_dropped() {
        let budget = super::super::budget::BodyBudget::new(1 << 20);
        let mut held = budget.reservation();
        assert!(held.grow(SHARED_PIECE * 2));
        let answer = Bytes::from(vec![1u8; SHARED_PIECE + 1]);
        let mut body = Box::pin(Buffered::shared(answer).holding(held));
        let first = std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await;
        assert!(matches!(first, Some(Ok(ref piece)) if piece.len() == SHARED_PIECE));
        assert_eq!(budget.used(), SHARED_PIECE * 2, "one byte not yet taken");
        let last = std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await;
        assert!(matches!(last, Some(Ok(ref piece)) if piece.len() == 1));
        assert_eq!(
            budget.used(),
            SHARED_PIECE * 2,
            "the last piece, a view of the whole answer, may still wait to be sent"
        );
        drop(body);
        assert_eq!(budget.used(), 0, "given back with the body");
        // A body dropped unread gives its bytes back too.
        let mut held = budget.reservation();
        assert!(held.grow(100));
        drop(Buffered::review(vec![0; 100]).holding(held));
        assert_eq!(budget.used(), 0);
    }

    #[actix_web::test]
    async fn a_body_not_taken_in_time_fails_before_its_next_piece() {
        let budget = super::super::budget::BodyBudget::new(1 << 20);
        let mut held = budget.reservation();
        assert!(held.grow(SHARED_PIECE * 3));
        let answer = Bytes::from(vec![1u8; SHARED_PIECE * 3]);
        let mut body = Box::pin(
            Buffered::shared(answer)
                .holding(held)
                .taken_within(Duration::ZERO),
        );
        let next = std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await;
        assert!(matches!(next, Some(Err(TakenTooSlowly(_)))), "{next:?}");
        drop(body);
        assert_eq!(budget.used(), 0, "the closed connection drops the body");
        // Within its time, a body yields its pieces as before.
        let mut body = Box::pin(
            Buffered::shared(Bytes::from(vec![1u8; SHARED_PIECE + 1]))
                .taken_within(Duration::from_secs(3600)),
        );
        let first = std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await;
        assert!(matches!(first, Some(Ok(ref piece)) if piece.len() == SHARED_PIECE));
    }

    #[actix_web::test]
    async fn shared_pieces_are_views_of_the_one_answer() {
        let answer = Bytes::from(vec![7u8; SHARED_PIECE * 2 + 10]);
        let mut body = Box::pin(Buffered::shared(answer.clone()));
        let mut lengths = Vec::new();
        while let Some(piece) = std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await {
            let piece = piece.expect("no deadline");
            // A view, not a copy: it points into the answer's buffer.
            let offset = piece.as_ptr() as usize - answer.as_ptr() as usize;
            assert!(offset + piece.len() <= answer.len());
            lengths.push(piece.len());
        }
        assert_eq!(lengths, [SHARED_PIECE, SHARED_PIECE, 10]);
    }
}
