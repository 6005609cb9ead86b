//! Quoting a client's text in snowgate's own messages, bounded: a 429 or a -32600 is cheap to
//! provoke, so none may carry much of what the client sent (see `crate::error`). The envelope's
//! messages use it too, so it lives with the wire, below the error type.

/// The most bytes of a client's text (a method name, a media type, a key) a message quotes;
/// the longest method name a node serves has 27.
pub const MAX_ECHO: usize = 64;

/// A client's text as a message quotes it: its first [`MAX_ECHO`] bytes (cut at a character
/// boundary), then `…` and its length when it was longer.
pub struct Echo<'a> {
    text: &'a str,
    quoted: bool,
}

impl<'a> Echo<'a> {
    /// Quoted, as `{:?}` writes it.
    pub fn quoted(text: &'a str) -> Echo<'a> {
        Echo { text, quoted: true }
    }

    /// As it is.
    pub fn plain(text: &'a str) -> Echo<'a> {
        Echo {
            text,
            quoted: false,
        }
    }
}

/// A client's bytes as a message quotes them unquoted: its first [`MAX_ECHO`] bytes as sent
/// (not decoded: a node writes a header's bytes back unchanged), then `…` and its length when it
/// was longer.
pub fn bounded(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if bytes.len() <= MAX_ECHO {
        return std::borrow::Cow::Borrowed(bytes);
    }
    let mut out = bytes[..MAX_ECHO].to_vec();
    out.extend_from_slice(format!("… ({} bytes)", bytes.len()).as_bytes());
    std::borrow::Cow::Owned(out)
}

impl std::fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut cut = self.text.len().min(MAX_ECHO);
        while !self.text.is_char_boundary(cut) {
            cut -= 1;
        }
        let shown = &self.text[..cut];
        if self.quoted {
            write!(f, "{shown:?}")?;
        } else {
            f.write_str(shown)?;
        }
        if cut < self.text.len() {
            write!(f, "… ({} bytes)", self.text.len())?;
        }
        Ok(())
    }
}
