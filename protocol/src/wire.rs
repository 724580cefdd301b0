//! Primitive big-endian field encoding, Kafka style: fixed-width integers, strings with an i16
//! length (-1 is null), byte blobs and arrays with an i32 length (-1 is null).
//!
//! Every length is checked against the bytes actually left before anything is allocated, so a
//! lying length prefix costs nothing but an error.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::DecodeError;

/// A cursor over one message's bytes; every read is bounds-checked.
pub struct Reader {
    buf: Bytes,
}

impl Reader {
    /// Read from `buf`.
    pub fn new(buf: Bytes) -> Self {
        Reader { buf }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    fn need(&self, field: &'static str, needed: usize) -> Result<(), DecodeError> {
        if self.buf.remaining() < needed {
            return Err(DecodeError::Truncated { field, needed, remaining: self.buf.remaining() });
        }
        Ok(())
    }

    /// One signed byte.
    pub fn i8(&mut self, field: &'static str) -> Result<i8, DecodeError> {
        self.need(field, 1)?;
        Ok(self.buf.get_i8())
    }

    /// A boolean byte (0 or 1).
    pub fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.i8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError::InvalidValue { field, detail: format!("boolean byte {v}") }),
        }
    }

    /// A big-endian i16.
    pub fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        self.need(field, 2)?;
        Ok(self.buf.get_i16())
    }

    /// A big-endian i32.
    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        self.need(field, 4)?;
        Ok(self.buf.get_i32())
    }

    /// A big-endian i64.
    pub fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        self.need(field, 8)?;
        Ok(self.buf.get_i64())
    }

    /// A big-endian u128 (a topic id).
    pub fn u128(&mut self, field: &'static str) -> Result<u128, DecodeError> {
        self.need(field, 16)?;
        Ok(self.buf.get_u128())
    }

    /// A nullable string: i16 length, -1 for null, then UTF-8 bytes.
    pub fn nullable_string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        let len = self.i16(field)?;
        if len == -1 {
            return Ok(None);
        }
        if len < 0 {
            return Err(DecodeError::InvalidLength { field, len: len.into() });
        }
        let len = len as usize;
        self.need(field, len)?;
        let raw = self.buf.split_to(len);
        String::from_utf8(raw.to_vec()).map(Some).map_err(|_| DecodeError::InvalidUtf8 { field })
    }

    /// A non-null string.
    pub fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        self.nullable_string(field)?.ok_or(DecodeError::UnexpectedNull { field })
    }

    /// A byte blob: i32 length then the bytes, shared with the message buffer (no copy).
    pub fn bytes(&mut self, field: &'static str) -> Result<Bytes, DecodeError> {
        let len = self.i32(field)?;
        if len < 0 {
            return Err(DecodeError::InvalidLength { field, len: len.into() });
        }
        let len = len as usize;
        self.need(field, len)?;
        Ok(self.buf.split_to(len))
    }

    /// An array length: i32, checked against the bytes left assuming every element takes at
    /// least `min_element_bytes`, so a lying count cannot make the caller allocate.
    pub fn array_len(&mut self, field: &'static str, min_element_bytes: usize) -> Result<usize, DecodeError> {
        let len = self.i32(field)?;
        if len < 0 || (len as usize).saturating_mul(min_element_bytes.max(1)) > self.remaining() {
            return Err(DecodeError::InvalidLength { field, len: len.into() });
        }
        Ok(len as usize)
    }

    /// An array of i32 (i32 count, then the values).
    pub fn i32_array(&mut self, field: &'static str) -> Result<Vec<i32>, DecodeError> {
        let n = self.array_len(field, 4)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.i32(field)?);
        }
        Ok(out)
    }

    /// An array of (string, string) pairs (i32 count, then each pair's two strings): a topic's
    /// configs.
    pub fn string_pairs(&mut self, field: &'static str) -> Result<Vec<(String, String)>, DecodeError> {
        let n = self.array_len(field, 4)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push((self.string(field)?, self.string(field)?));
        }
        Ok(out)
    }

    /// Fails if anything is left: every message is decoded whole.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.has_remaining() {
            return Err(DecodeError::TrailingBytes(self.buf.remaining()));
        }
        Ok(())
    }
}

/// Writers for the same primitives.
pub trait WriteExt {
    /// A nullable string.
    fn put_nullable_string(&mut self, s: Option<&str>);
    /// A non-null string.
    fn put_string(&mut self, s: &str);
    /// A byte blob with an i32 length.
    fn put_blob(&mut self, b: &[u8]);
    /// A boolean byte.
    fn put_bool(&mut self, b: bool);
    /// An array of i32.
    fn put_i32_array(&mut self, v: &[i32]);
    /// An array of (string, string) pairs ([`Reader::string_pairs`]).
    fn put_string_pairs(&mut self, pairs: &[(String, String)]);
}

impl WriteExt for BytesMut {
    fn put_nullable_string(&mut self, s: Option<&str>) {
        match s {
            None => self.put_i16(-1),
            Some(s) => {
                // Strings are bounded by the validators (names at most 249 bytes, messages
                // truncated by `Status::new`), so this never truncates a real field.
                let len = s.len().min(i16::MAX as usize);
                self.put_i16(len as i16);
                self.put_slice(&s.as_bytes()[..len]);
            }
        }
    }

    fn put_string(&mut self, s: &str) {
        self.put_nullable_string(Some(s));
    }

    fn put_blob(&mut self, b: &[u8]) {
        self.put_i32(b.len() as i32);
        self.put_slice(b);
    }

    fn put_bool(&mut self, b: bool) {
        self.put_i8(b as i8);
    }

    fn put_string_pairs(&mut self, pairs: &[(String, String)]) {
        self.put_i32(pairs.len() as i32);
        for (a, b) in pairs {
            self.put_string(a);
            self.put_string(b);
        }
    }

    fn put_i32_array(&mut self, v: &[i32]) {
        self.put_i32(v.len() as i32);
        for x in v {
            self.put_i32(*x);
        }
    }
}
