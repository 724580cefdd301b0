//! The record compression Kafka clients use (gzip, snappy, lz4, zstd), decompressed with a
//! bound: a broker checks a compressed batch's records before it stores the batch as it came,
//! and a few kilobytes must not make it allocate gigabytes.
//!
//! Pure-Rust decoders only (flate2's miniz_oxide, snap, lz4_flex, ruzstd): no C toolchain in
//! the default build.

use std::io::Read;

use thiserror::Error;

/// The compression codecs of a v2 batch's attributes (bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// 1.
    Gzip,
    /// 2: raw snappy, or in xerial's framing (Java clients, kafka-python).
    Snappy,
    /// 3: the LZ4 frame format.
    Lz4,
    /// 4.
    Zstd,
}

impl Codec {
    /// The codec of attribute value `code` (1 to 4); `None` for none (0) or an unknown one.
    pub fn from_code(code: i16) -> Option<Codec> {
        match code {
            1 => Some(Codec::Gzip),
            2 => Some(Codec::Snappy),
            3 => Some(Codec::Lz4),
            4 => Some(Codec::Zstd),
            _ => None,
        }
    }

    /// Kafka's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// Why compressed records could not be read.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CompressionError {
    /// The data does not decompress.
    #[error("{codec} data does not decompress: {detail}")]
    Corrupt {
        /// Codec name.
        codec: &'static str,
        /// Why.
        detail: String,
    },
    /// It decompresses to more than the limit.
    #[error("{codec} records decompress to more than {max} bytes (decompressed_batch_bytes_max)")]
    TooLarge {
        /// Codec name.
        codec: &'static str,
        /// The limit, in bytes.
        max: usize,
    },
}

/// xerial's snappy framing: magic, then version and compatible version (i32 each), then
/// blocks of a big-endian i32 length and a raw snappy block.
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_BYTES: usize = 16;

/// Decompress `data` with `codec` into at most `max_bytes` bytes.
pub fn decompress(codec: Codec, data: &[u8], max_bytes: usize) -> Result<Vec<u8>, CompressionError> {
    let name = codec.name();
    let corrupt = |e: &dyn std::fmt::Display| CompressionError::Corrupt { codec: name, detail: e.to_string() };
    let bounded = |reader: &mut dyn Read| -> Result<Vec<u8>, CompressionError> {
        let mut out = Vec::new();
        let limit = u64::try_from(max_bytes).unwrap_or(u64::MAX).saturating_add(1);
        reader.take(limit).read_to_end(&mut out).map_err(|e| corrupt(&e))?;
        if out.len() > max_bytes {
            return Err(CompressionError::TooLarge { codec: name, max: max_bytes });
        }
        Ok(out)
    };
    match codec {
        Codec::Gzip => bounded(&mut flate2::read::GzDecoder::new(data)),
        Codec::Lz4 => bounded(&mut lz4_flex::frame::FrameDecoder::new(data)),
        Codec::Zstd => {
            let mut decoder = ruzstd::decoding::StreamingDecoder::new(data).map_err(|e| corrupt(&e))?;
            bounded(&mut decoder)
        }
        Codec::Snappy => {
            if data.len() >= XERIAL_HEADER_BYTES && data.starts_with(XERIAL_MAGIC) {
                let mut out = Vec::new();
                let mut rest = &data[XERIAL_HEADER_BYTES..];
                while !rest.is_empty() {
                    let Some((len, block)) = rest.split_first_chunk::<4>() else {
                        return Err(corrupt(&"a block length cut short"));
                    };
                    let len = u32::from_be_bytes(*len) as usize;
                    let Some((block, tail)) = block.split_at_checked(len) else {
                        return Err(corrupt(&"a block longer than the data"));
                    };
                    raw_snappy(block, &mut out, max_bytes)?;
                    rest = tail;
                }
                Ok(out)
            } else {
                let mut out = Vec::new();
                raw_snappy(data, &mut out, max_bytes)?;
                Ok(out)
            }
        }
    }
}

/// Append one raw snappy block's data to `out`, keeping `out` within `max_bytes`.
fn raw_snappy(block: &[u8], out: &mut Vec<u8>, max_bytes: usize) -> Result<(), CompressionError> {
    let corrupt = |e: snap::Error| CompressionError::Corrupt { codec: "snappy", detail: e.to_string() };
    let len = snap::raw::decompress_len(block).map_err(corrupt)?;
    if out.len().saturating_add(len) > max_bytes {
        return Err(CompressionError::TooLarge { codec: "snappy", max: max_bytes });
    }
    let at = out.len();
    out.resize(at + len, 0);
    let n = snap::raw::Decoder::new().decompress(block, &mut out[at..]).map_err(corrupt)?;
    out.truncate(at + n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn every_codec_round_trips() {
        let data: Vec<u8> = (0..10_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        assert_eq!(decompress(Codec::Gzip, &gzip(&data), 1 << 20).unwrap(), data);
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(decompress(Codec::Snappy, &raw, 1 << 20).unwrap(), data);
        let mut xerial = XERIAL_MAGIC.to_vec();
        xerial.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        for chunk in data.chunks(3_000) {
            let block = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            xerial.extend_from_slice(&(block.len() as u32).to_be_bytes());
            xerial.extend_from_slice(&block);
        }
        assert_eq!(decompress(Codec::Snappy, &xerial, 1 << 20).unwrap(), data);
        let mut lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz4.write_all(&data).unwrap();
        assert_eq!(decompress(Codec::Lz4, &lz4.finish().unwrap(), 1 << 20).unwrap(), data);
        // A zstd frame of one raw block (ruzstd decodes; the tests do not need an encoder).
        let mut zstd = vec![0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x05];
        zstd.extend_from_slice(&[0x29, 0x00, 0x00]); // last block, raw, 5 bytes
        zstd.extend_from_slice(b"hello");
        assert_eq!(decompress(Codec::Zstd, &zstd, 100).unwrap(), b"hello");
    }

    /// A small input that decompresses to a lot is refused at the limit, not expanded.
    #[test]
    fn a_decompression_bomb_stops_at_the_limit() {
        let zeros = vec![0u8; 10 << 20];
        let bomb = gzip(&zeros);
        assert!(bomb.len() < 20_000, "{}", bomb.len());
        assert_eq!(
            decompress(Codec::Gzip, &bomb, 1 << 20),
            Err(CompressionError::TooLarge { codec: "gzip", max: 1 << 20 })
        );
        let raw = snap::raw::Encoder::new().compress_vec(&zeros).unwrap();
        assert!(matches!(decompress(Codec::Snappy, &raw, 1 << 20), Err(CompressionError::TooLarge { .. })));
        assert!(matches!(decompress(Codec::Gzip, b"not gzip", 100), Err(CompressionError::Corrupt { .. })));
        assert!(matches!(decompress(Codec::Zstd, b"nope", 100), Err(CompressionError::Corrupt { .. })));
        assert!(matches!(decompress(Codec::Lz4, b"not an lz4 frame", 100), Err(CompressionError::Corrupt { .. })));
    }
}
