//! Debezium Server's offsets file: Kafka's `FileOffsetBackingStore`, one
//! `java.util.HashMap<byte[], byte[]>` written by `ObjectOutputStream`.
//! Each key is the JSON `[<engine name>, <partition>]`, each value the
//! offset's JSON. This module reads and writes that one shape of Java's
//! serialization stream (the protocol's version 2), nothing more general.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Code, Error};

const MAGIC: [u8; 4] = [0xAC, 0xED, 0x00, 0x05];
const TC_NULL: u8 = 0x70;
const TC_REFERENCE: u8 = 0x71;
const TC_CLASSDESC: u8 = 0x72;
const TC_OBJECT: u8 = 0x73;
const TC_ARRAY: u8 = 0x75;
const TC_BLOCKDATA: u8 = 0x77;
const TC_ENDBLOCKDATA: u8 = 0x78;
/// The first handle a stream assigns.
const BASE_HANDLE: u32 = 0x7E_0000;
const HASHMAP: &str = "java.util.HashMap";
const HASHMAP_UID: i64 = 362_498_820_763_181_265;
const BYTES: &str = "[B";
const BYTES_UID: i64 = -5_984_413_125_824_719_648;
/// `SC_WRITE_METHOD | SC_SERIALIZABLE`, and `SC_SERIALIZABLE`.
const HASHMAP_FLAGS: u8 = 0x03;
const BYTES_FLAGS: u8 = 0x02;
/// Whatever engine wrote no entry yet: Debezium Server names its engine
/// after the sink (`kafka`).
const DEFAULT_ENGINE: &str = "kafka";

/// One stored entry: key and value, either of which Java allows to be null.
pub type Entry = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The file, read whole, as the store itself reads and rewrites it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsFile {
    path: PathBuf,
    entries: Vec<Entry>,
}

fn invalid(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::new(
        Code::OFFSET_FILE_INVALID,
        format!("Debezium Server's offsets file {}: {why}", path.display()),
    )
}

impl OffsetsFile {
    /// A missing file holds no offsets, as for the store.
    pub fn read(path: &Path) -> Result<OffsetsFile, Error> {
        let entries = match std::fs::read(path) {
            Ok(bytes) => decode(&bytes).map_err(|why| invalid(path, why))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(invalid(path, e)),
        };
        Ok(OffsetsFile {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// The key's engine name and the stored offset of `partition`.
    fn find(&self, partition: &Value) -> Option<(usize, Option<Value>)> {
        self.entries
            .iter()
            .enumerate()
            .find_map(|(i, (key, value))| {
                let key: Value = serde_json::from_slice(key.as_deref()?).ok()?;
                (key.get(1)? == partition).then(|| {
                    let offset = value
                        .as_deref()
                        .and_then(|v| serde_json::from_slice(v).ok());
                    (i, offset)
                })
            })
    }

    /// The offset stored for `partition`, if any.
    pub fn offset(&self, partition: &Value) -> Option<Value> {
        self.find(partition).and_then(|(_, offset)| offset)
    }

    /// Sets `partition`'s offset, under the engine name already stored for
    /// it (or for another partition), else Debezium Server's.
    pub fn set(&mut self, partition: &Value, offset: &Value) {
        let value = offset.to_string().into_bytes();
        if let Some((i, _)) = self.find(partition) {
            self.entries[i].1 = Some(value);
            return;
        }
        let engine = self
            .entries
            .iter()
            .find_map(|(key, _)| {
                let key: Value = serde_json::from_slice(key.as_deref()?).ok()?;
                key.get(0)?.as_str().map(str::to_string)
            })
            .unwrap_or_else(|| DEFAULT_ENGINE.to_string());
        let key = Value::Array(vec![Value::String(engine), partition.clone()]);
        self.entries
            .push((Some(key.to_string().into_bytes()), Some(value)));
    }

    /// Replaces the file whole (a new file renamed over it), as the store
    /// would leave it.
    pub fn write(&self) -> Result<(), Error> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".outbox-cdc.tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, encode(&self.entries)).map_err(|e| invalid(&tmp, e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| invalid(&self.path, e))
    }
}

/// Writes the entries as `ObjectOutputStream.writeObject(hashMap)` does.
pub fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut capacity: usize = 16;
    while entries.len() * 4 > capacity * 3 {
        capacity *= 2;
    }
    let mut b = MAGIC.to_vec();
    b.push(TC_OBJECT);
    b.push(TC_CLASSDESC);
    utf(&mut b, HASHMAP);
    b.extend(HASHMAP_UID.to_be_bytes());
    b.push(HASHMAP_FLAGS);
    b.extend(2u16.to_be_bytes());
    b.push(b'F');
    utf(&mut b, "loadFactor");
    b.push(b'I');
    utf(&mut b, "threshold");
    b.push(TC_ENDBLOCKDATA);
    b.push(TC_NULL);
    b.extend(0.75f32.to_be_bytes());
    b.extend(((capacity * 3 / 4) as i32).to_be_bytes());
    b.push(TC_BLOCKDATA);
    b.push(8);
    b.extend((capacity as i32).to_be_bytes());
    b.extend((entries.len() as i32).to_be_bytes());
    // Handles: the map's class 0, the map 1, `[B`'s class 2.
    let mut bytes_class_written = false;
    for (key, value) in entries {
        for array in [key, value] {
            let Some(array) = array else {
                b.push(TC_NULL);
                continue;
            };
            b.push(TC_ARRAY);
            if bytes_class_written {
                b.push(TC_REFERENCE);
                b.extend((BASE_HANDLE + 2).to_be_bytes());
            } else {
                bytes_class_written = true;
                b.push(TC_CLASSDESC);
                utf(&mut b, BYTES);
                b.extend(BYTES_UID.to_be_bytes());
                b.push(BYTES_FLAGS);
                b.extend(0u16.to_be_bytes());
                b.push(TC_ENDBLOCKDATA);
                b.push(TC_NULL);
            }
            b.extend((array.len() as i32).to_be_bytes());
            b.extend(array);
        }
    }
    b.push(TC_ENDBLOCKDATA);
    b
}

fn utf(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as u16).to_be_bytes());
    b.extend(s.as_bytes());
}

/// What a handle names.
#[derive(Clone)]
enum Handle {
    Class(String),
    Map,
    Bytes(Vec<u8>),
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    handles: Vec<Handle>,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("ends early, at byte {}", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn utf(&mut self) -> Result<String, String> {
        let n = u16::from_be_bytes(self.array()?) as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|e| e.to_string())
    }

    fn expect(&mut self, tag: u8, what: &str) -> Result<(), String> {
        match self.u8()? {
            t if t == tag => Ok(()),
            t => Err(format!(
                "expected {what} at byte {}, found 0x{t:02x}",
                self.at - 1
            )),
        }
    }

    fn handle(&mut self) -> Result<Handle, String> {
        let h = u32::from_be_bytes(self.array()?);
        h.checked_sub(BASE_HANDLE)
            .and_then(|i| self.handles.get(i as usize))
            .cloned()
            .ok_or_else(|| format!("an unknown handle 0x{h:08x}"))
    }

    /// A class description (new or a reference to one): its name.
    fn class(&mut self, uid: i64) -> Result<(String, Vec<u8>), String> {
        match self.u8()? {
            TC_CLASSDESC => {
                let name = self.utf()?;
                let read_uid = i64::from_be_bytes(self.array()?);
                if read_uid != uid {
                    return Err(format!("{name} has serialVersionUID {read_uid}"));
                }
                self.handles.push(Handle::Class(name.clone()));
                let _flags = self.u8()?;
                let fields = u16::from_be_bytes(self.array()?);
                let mut types = Vec::new();
                for _ in 0..fields {
                    let t = self.u8()?;
                    if !matches!(t, b'F' | b'I') {
                        return Err(format!("{name} has a field of type {}", t as char));
                    }
                    self.utf()?;
                    types.push(t);
                }
                self.expect(TC_ENDBLOCKDATA, "the end of the class annotation")?;
                self.expect(TC_NULL, "no superclass")?;
                Ok((name, types))
            }
            TC_REFERENCE => match self.handle()? {
                Handle::Class(name) => Ok((name, Vec::new())),
                _ => Err("a reference to an object where a class was expected".into()),
            },
            t => Err(format!(
                "expected a class at byte {}, found 0x{t:02x}",
                self.at - 1
            )),
        }
    }

    /// A `byte[]` or null.
    fn bytes(&mut self) -> Result<Option<Vec<u8>>, String> {
        match self.u8()? {
            TC_NULL => Ok(None),
            TC_REFERENCE => match self.handle()? {
                Handle::Bytes(b) => Ok(Some(b)),
                _ => Err("a reference to something other than a byte[]".into()),
            },
            TC_ARRAY => {
                let (name, _) = self.class(BYTES_UID)?;
                if name != BYTES {
                    return Err(format!("an array of {name}, not byte[]"));
                }
                let n = usize::try_from(self.i32()?).map_err(|_| "a negative length")?;
                let array = self.take(n)?.to_vec();
                self.handles.push(Handle::Bytes(array.clone()));
                Ok(Some(array))
            }
            t => Err(format!(
                "expected a byte[] at byte {}, found 0x{t:02x}",
                self.at - 1
            )),
        }
    }
}

/// Reads what [`encode`] and Java's `ObjectOutputStream` write.
pub fn decode(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    let mut r = Reader {
        bytes,
        at: 0,
        handles: Vec::new(),
    };
    if r.array::<4>()? != MAGIC {
        return Err("not a Java serialization stream".into());
    }
    r.expect(TC_OBJECT, "an object")?;
    let (name, fields) = r.class(HASHMAP_UID)?;
    if name != HASHMAP {
        return Err(format!("holds a {name}, not a {HASHMAP}"));
    }
    r.handles.push(Handle::Map);
    for _ in &fields {
        r.take(4)?;
    }
    r.expect(TC_BLOCKDATA, "the map's sizes")?;
    if r.u8()? != 8 {
        return Err("the map's sizes are not two integers".into());
    }
    let _buckets = r.i32()?;
    let size = usize::try_from(r.i32()?).map_err(|_| "a negative size")?;
    let mut entries = Vec::with_capacity(size.min(1024));
    for _ in 0..size {
        let key = r.bytes()?;
        let value = r.bytes()?;
        entries.push((key, value));
    }
    r.expect(TC_ENDBLOCKDATA, "the end of the map")?;
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ObjectOutputStream.writeObject` of a `HashMap<byte[], byte[]>` with
    /// `"k2" -> null` and an offset, from a JDK 21 (printed as hex by a
    /// three-line Java program).
    const FROM_JAVA: &str = "aced0005737200116a6176612e7574696c2e486173684d61700507dac1c31660d103000246000a6c6f6164466163746f724900097468726573686f6c6478703f4000000000000c77080000001000000002757200025b42acf317f8060854e00200007870000000026b32707571007e00020000001b5b226b61666b61222c7b22736572766572223a2273686f70227d5d7571007e00020000002b7b226c736e5f70726f63223a3132332c226c736e5f636f6d6d6974223a3130302c226c736e223a3132337d78";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn java_entries() -> Vec<Entry> {
        vec![
            (Some(b"k2".to_vec()), None),
            (
                Some(br#"["kafka",{"server":"shop"}]"#.to_vec()),
                Some(br#"{"lsn_proc":123,"lsn_commit":100,"lsn":123}"#.to_vec()),
            ),
        ]
    }

    #[test]
    fn reads_what_java_writes_and_writes_the_same_bytes() {
        let java = unhex(FROM_JAVA);
        assert_eq!(decode(&java).unwrap(), java_entries());
        assert_eq!(encode(&java_entries()), java);
    }

    #[test]
    fn an_empty_map_and_many_entries_read_back() {
        assert_eq!(decode(&encode(&[])).unwrap(), Vec::<Entry>::new());
        let many: Vec<Entry> = (0..40)
            .map(|i| (Some(format!("k{i}").into_bytes()), Some(vec![i as u8; i])))
            .collect();
        assert_eq!(decode(&encode(&many)).unwrap(), many);
    }

    #[test]
    fn refuses_what_is_not_the_store_s_map() {
        let java = unhex(FROM_JAVA);
        for cut in [0, 3, 20, java.len() - 1] {
            assert!(decode(&java[..cut]).is_err(), "cut at {cut}");
        }
        let mut other = java.clone();
        other[10] = b'X'; // java.util.XashMap
        assert!(decode(&other)
            .unwrap_err()
            .contains("not a java.util.HashMap"));
        assert!(decode(b"{\"lsn\":1}").unwrap_err().contains("not a Java"));
    }

    #[test]
    fn set_replaces_the_partition_s_offset_under_its_engine_name() {
        let dir = std::env::temp_dir().join(format!("offsets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("offsets.dat");
        std::fs::write(&path, unhex(FROM_JAVA)).unwrap();
        let mut file = OffsetsFile::read(&path).unwrap();
        let shop = serde_json::json!({"server": "shop"});
        assert_eq!(
            file.offset(&shop).unwrap()["lsn_commit"],
            serde_json::json!(100)
        );
        file.set(&shop, &serde_json::json!({"lsn": 7}));
        file.set(
            &serde_json::json!({"server": "other"}),
            &serde_json::json!({"lsn": 8}),
        );
        file.write().unwrap();
        let back = decode(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[1].1.as_deref(), Some(&br#"{"lsn":7}"#[..]));
        assert_eq!(
            back[2].0.as_deref(),
            Some(&br#"["kafka",{"server":"other"}]"#[..])
        );
        let missing = OffsetsFile::read(&dir.join("none.dat")).unwrap();
        assert_eq!(missing.offset(&shop), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
