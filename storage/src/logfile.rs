//! The transaction log's file: where a logged group's datoms are made durable before the caller is told, outside
//! DuckDB (`txlog.rs` says when a group is logged and how the log is applied to the tables).
//!
//! A DuckDB COMMIT that writes a table costs 0.5 to 1.5 ms here however few rows it moves, on top of the table
//! operation itself (another 0.5 to 1.2 ms for the few rows of a single-datom update); an append to a file of our
//! own and its `fdatasync` cost 0.1 to 0.3 ms on the same disk. So a logged group appends one record to the file
//! beside the database (`<database file>.<store schema>.txlog`) and syncs it, and DuckDB sees the datoms only
//! when the log is applied; the DuckDB transaction that applies it also records the sequence number of the last
//! record it applied (the store's `meta` table, key `log_applied`), so that a crash after that COMMIT and before
//! the file is emptied applies nothing twice.
//!
//! Format: a header, `MNTLOG01` and the store's log id (a random 64-bit number kept in `meta` under `log_id`, so
//! that a file left beside a database that was since replaced is never applied to the new one), then records of
//! `len: u32 | crc32(body): u32 | body`, body `seq: u64 | rows: u32 | row*`, a row `a: i64 | e: i64 | added: u8 |
//! tx: i64 | rtx: i64 | value`, the value a tag byte and its bytes (integers and instants as i64, doubles as f64
//! bits, floats as f32 bits, text and blobs as `len: u32` and the bytes, booleans as one byte), then, when the
//! record's group moved the partition marks, `next_db: i64 | next_user: i64` (a record of an earlier version ends
//! after its rows, and a reader of that version stops at the row count). All little-endian.
//! Reading stops at the first record that is short or whose checksum fails (a write cut short by a crash, never
//! acknowledged: the caller is told only after the sync), and the file is cut back there.

use crate::error::{Result, StorageError};
use crate::value::Val;
use planner::schema::Entid;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// One logged datom: `(entity, attribute, value)` (the transactor's own datom shape, which the apply writes
/// without a copy), added, the tx that asserted it, the tx that retracts it (0 for an assertion).
pub type LogRow = ((Entid, Entid, Val), bool, i64, i64);

const MAGIC: &[u8; 8] = b"MNTLOG01";
const HEADER: u64 = 16;

/// An open log file, positioned for appends.
pub struct LogFile {
    path: PathBuf,
    file: File,
    len: u64,
}

/// The partition marks a logged group moved: the next entid of `:db.part/db` and of `:db.part/user`.
pub type Marks = (Entid, Entid);

/// One record: its sequence number, its rows and the partition marks after its group (None: unmoved).
pub type Record = (u64, Vec<LogRow>, Option<Marks>);

/// The records of a log file read at open, in file order.
pub type Records = Vec<Record>;

impl LogFile {
    /// Opens (creating it when missing) the log file at `path` of the store whose log id is `id`, and returns it
    /// with the records it holds. A file of another log id (a database replaced since) is emptied; a torn last
    /// record is cut off. Errors: [`StorageError::Store`] naming the file when it cannot be read or written.
    pub fn open(path: &Path, id: u64) -> Result<(LogFile, Records)> {
        let err = |e: std::io::Error| StorageError::Store(format!("transaction log file {}: {e}", path.display()));
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(path).map_err(err)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(err)?;
        let ours = bytes.len() as u64 >= HEADER && &bytes[..8] == MAGIC && bytes[8..16] == id.to_le_bytes();
        let (records, good) = if ours { parse(&bytes[HEADER as usize..]) } else { (Vec::new(), 0) };
        let len = if ours { HEADER + good as u64 } else { 0 };
        let mut log = LogFile { path: path.to_path_buf(), file, len };
        if !ours {
            log.file.set_len(0).map_err(err)?;
            let mut header = MAGIC.to_vec();
            header.extend(id.to_le_bytes());
            log.file.write_all(&header).map_err(err)?;
            log.file.sync_data().map_err(err)?;
            log.len = HEADER;
        } else if len < bytes.len() as u64 {
            log.file.set_len(len).map_err(err)?;
        }
        Ok((log, records))
    }

    /// The records of the log file at `path` of log id `id` without changing it (for a database opened read-only):
    /// empty when there is no such file or it belongs to another log id.
    pub fn peek(path: &Path, id: u64) -> Result<Records> {
        let mut bytes = Vec::new();
        match File::open(path) {
            Ok(mut f) => f
                .read_to_end(&mut bytes)
                .map_err(|e| StorageError::Store(format!("transaction log file {}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StorageError::Store(format!("transaction log file {}: {e}", path.display()))),
        };
        let ours = bytes.len() as u64 >= HEADER && &bytes[..8] == MAGIC && bytes[8..16] == id.to_le_bytes();
        Ok(if ours { parse(&bytes[HEADER as usize..]).0 } else { Vec::new() })
    }

    /// Appends the record `seq` of `rows` and the partition `marks` its group moved, and syncs it (`fdatasync`):
    /// once this returns Ok, they survive a crash. On an error the file is cut back to what it held before.
    /// Errors: [`StorageError::Store`] naming the file.
    pub fn append(&mut self, seq: u64, rows: &[LogRow], marks: Option<Marks>) -> Result<()> {
        let mut body = Vec::with_capacity(12 + rows.len() * 40);
        body.extend(seq.to_le_bytes());
        body.extend((rows.len() as u32).to_le_bytes());
        for r in rows {
            encode_row(&mut body, r)?;
        }
        if let Some((db, user)) = marks {
            body.extend(db.to_le_bytes());
            body.extend(user.to_le_bytes());
        }
        let mut rec = Vec::with_capacity(body.len() + 8);
        rec.extend((body.len() as u32).to_le_bytes());
        rec.extend(crc32fast::hash(&body).to_le_bytes());
        rec.extend(body);
        let written = self.file.write_all(&rec).and_then(|_| self.file.sync_data());
        if let Err(e) = written {
            let _ = self.file.set_len(self.len);
            return Err(StorageError::Store(format!("transaction log file {}: {e}", self.path.display())));
        }
        self.len += rec.len() as u64;
        Ok(())
    }

    /// Drops every record (they have been applied to the tables, and the applied mark says so): the file keeps its
    /// header. Not synced: a crash that brings the records back finds them at or below the applied mark.
    pub fn clear(&mut self) -> Result<()> {
        self.file
            .set_len(HEADER)
            .map_err(|e| StorageError::Store(format!("transaction log file {}: {e}", self.path.display())))?;
        self.len = HEADER;
        Ok(())
    }
}

/// The path of the log file of store schema `schema` in the database file `db`.
pub fn path_for(db: &str, schema: &str) -> PathBuf {
    PathBuf::from(format!("{db}.{schema}.txlog"))
}

fn encode_row(out: &mut Vec<u8>, ((e, a, v), added, tx, rtx): &LogRow) -> Result<()> {
    out.extend(a.to_le_bytes());
    out.extend(e.to_le_bytes());
    out.push(u8::from(*added));
    out.extend(tx.to_le_bytes());
    out.extend(rtx.to_le_bytes());
    let text = |out: &mut Vec<u8>, tag: u8, b: &[u8]| {
        out.push(tag);
        out.extend((b.len() as u32).to_le_bytes());
        out.extend(b);
    };
    let tagged = |out: &mut Vec<u8>, tag: u8, b: &[u8]| {
        out.push(tag);
        out.extend(b);
    };
    match v {
        Val::Ref(x) => tagged(out, 0, &x.to_le_bytes()),
        Val::Long(x) => tagged(out, 1, &x.to_le_bytes()),
        Val::Instant(x) => tagged(out, 2, &x.to_le_bytes()),
        Val::Double(x) => tagged(out, 3, &x.to_bits().to_le_bytes()),
        Val::Float(x) => tagged(out, 4, &x.to_bits().to_le_bytes()),
        Val::Str(s) => text(out, 5, s.as_bytes()),
        Val::Uuid(s) => text(out, 6, s.as_bytes()),
        Val::BigInt(s) => text(out, 7, s.as_bytes()),
        Val::BigDec(s) => text(out, 8, s.as_bytes()),
        Val::Bool(b) => tagged(out, 9, &[u8::from(*b)]),
        Val::Bytes(b) => text(out, 10, b),
        Val::Tuple(_) => return Err(StorageError::Store("a tuple value cannot be logged".into())),
    }
    Ok(())
}

/// The records of `bytes` (after the header) and how many bytes of whole, intact records they make.
fn parse(bytes: &[u8]) -> (Records, usize) {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some((rec, used)) = record(&bytes[at..]) {
        out.push(rec);
        at += used;
    }
    (out, at)
}

fn record(b: &[u8]) -> Option<(Record, usize)> {
    let len = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?);
    let body = b.get(8..8 + len)?;
    if crc32fast::hash(body) != crc {
        return None;
    }
    let mut r = Reader(body);
    let seq = r.u64()?;
    let n = r.u32()? as usize;
    let mut rows = Vec::with_capacity(n.min(1 << 20));
    for _ in 0..n {
        let (a, e, added, tx, rtx) = (r.i64()?, r.i64()?, r.u8()? != 0, r.i64()?, r.i64()?);
        let v = match r.u8()? {
            0 => Val::Ref(r.i64()?),
            1 => Val::Long(r.i64()?),
            2 => Val::Instant(r.i64()?),
            3 => Val::Double(f64::from_bits(r.u64()?)),
            4 => Val::Float(f32::from_bits(r.u32()?)),
            5 => Val::Str(r.text()?),
            6 => Val::Uuid(r.text()?),
            7 => Val::BigInt(r.text()?),
            8 => Val::BigDec(r.text()?),
            9 => Val::Bool(r.u8()? != 0),
            10 => Val::Bytes(r.bytes()?.to_vec()),
            _ => return None,
        };
        rows.push(((e, a, v), added, tx, rtx));
    }
    let marks = match r.0.len() {
        0 => None,
        16 => Some((r.i64()?, r.i64()?)),
        _ => return None,
    };
    Some(((seq, rows, marks), 8 + len))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn text(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<LogRow> {
        vec![
            ((65536, 10, Val::Ref(65537)), true, 3, 0),
            ((65536, 11, Val::Str("a\u{0}b \"é\" 🙂".into())), false, 2, 3),
            ((65537, 12, Val::Double(-0.5)), true, 3, 0),
            ((65537, 13, Val::Float(1.25)), true, 3, 0),
            ((65537, 14, Val::Bool(true)), true, 3, 0),
            ((65537, 15, Val::Bytes(vec![0, 255, 7])), true, 3, 0),
            ((65537, 16, Val::BigDec("1.50".into())), true, 3, 0),
            ((65537, 17, Val::Instant(-1)), true, 3, 0),
        ]
    }

    #[test]
    fn records_read_back_verbatim_and_a_torn_tail_is_cut_off() {
        let dir = std::env::temp_dir().join(format!("mentat-logfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.txlog");
        let _ = std::fs::remove_file(&path);
        let (mut f, recs) = LogFile::open(&path, 7).unwrap();
        assert!(recs.is_empty());
        f.append(1, &rows(), None).unwrap();
        f.append(2, &rows()[..1], Some((1000, 70000))).unwrap();
        drop(f);
        let whole = std::fs::metadata(&path).unwrap().len();
        // a third record cut short, as a crash in the middle of its write leaves it
        let mut raw = OpenOptions::new().append(true).open(&path).unwrap();
        raw.write_all(&[40, 0, 0, 0, 1, 2, 3, 4, 5]).unwrap();
        drop(raw);
        let (f, recs) = LogFile::open(&path, 7).unwrap();
        assert_eq!(recs, vec![(1, rows(), None), (2, rows()[..1].to_vec(), Some((1000, 70000)))]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        assert_eq!(LogFile::peek(&path, 7).unwrap().len(), 2);
        drop(f);
        // another log id: the records are not this store's
        assert!(LogFile::peek(&path, 8).unwrap().is_empty());
        let (_, recs) = LogFile::open(&path, 8).unwrap();
        assert!(recs.is_empty());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), HEADER);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
