// Record codecs of job data: a blob is a sequence of [key, value] records in one of three
// content types, and a record's output partition is FNV-1a 32 of its key string.
// Formats (mirrored byte for byte by appliance/jobs/codecs.py):
//   application/json  one line per record: JSON.stringify([key, value]) + "\n"
//   text/csv          RFC 4180 rows key,value + "\r\n"; strings quoted, numbers/booleans/null bare,
//                     anything else as its JSON text, quoted (it comes back as a string)
//   application/bson  concatenated BSON documents {k: key, v: value} (bsonspec.org 1.1 subset)
// and the shuffle format, between stages only (never what a user reads): see "the shuffle format".
// A classic script (no modules): loaded by importScripts in the task sandbox, or evaluated on its
// own (V8 without Web APIs: TextEncoder/TextDecoder have fallbacks here).
(function () {
  'use strict';

  // --- UTF-8 ----------------------------------------------------------------------------------------

  // Code points of a string as UTF-8, a lone surrogate as U+FFFD (what TextEncoder does).
  function eachUtf8Byte(s, fn) {
    for (let i = 0; i < s.length; i++) {
      let c = s.charCodeAt(i);
      if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length) {
        const d = s.charCodeAt(i + 1);
        if (d >= 0xdc00 && d < 0xe000) { c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00); i++; }
      }
      if (c >= 0xd800 && c < 0xe000) c = 0xfffd;
      if (c < 0x80) fn(c);
      else if (c < 0x800) { fn(0xc0 | c >> 6); fn(0x80 | c & 63); }
      else if (c < 0x10000) { fn(0xe0 | c >> 12); fn(0x80 | c >> 6 & 63); fn(0x80 | c & 63); }
      else { fn(0xf0 | c >> 18); fn(0x80 | c >> 12 & 63); fn(0x80 | c >> 6 & 63); fn(0x80 | c & 63); }
    }
  }

  const utf8Encode = typeof TextEncoder === 'function'
    ? (encoder => s => encoder.encode(s))(new TextEncoder())
    : s => { const out = []; eachUtf8Byte(s, b => out.push(b)); return Uint8Array.from(out); };

  const utf8Decode = typeof TextDecoder === 'function'
    ? (decoder => bytes => decoder.decode(bytes))(new TextDecoder('utf-8', {fatal: true, ignoreBOM: true}))
    : bytes => {
      let binary = '';
      for (let i = 0; i < bytes.length; i += 8192) binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
      return decodeURIComponent(escape(binary));  // throws URIError on malformed UTF-8
    };

  function decodeText(bytes, what) {
    try {
      return utf8Decode(bytes);
    } catch (e) {
      throw new Error(`${what}: invalid UTF-8`);
    }
  }

  // --- keys and partitions --------------------------------------------------------------------------

  function keyString(key) {
    return typeof key === 'string' ? key : (JSON.stringify(key) ?? 'null');
  }

  // FNV-1a 32 over the UTF-8 bytes of the key string, without building the bytes. Every emit of a
  // hash-partitioned stage comes here: ASCII (a byte per char) is hashed inline, the rest of a key
  // from its first other char on goes through eachUtf8Byte.
  function partitionOf(key, partitions) {
    const s = keyString(key);
    let hash = 0x811c9dc5;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) {
        eachUtf8Byte(s.slice(i), b => { hash = Math.imul(hash ^ b, 16777619); });
        break;
      }
      hash = Math.imul(hash ^ c, 16777619);
    }
    return (hash >>> 0) % partitions;
  }

  // --- JSON lines -----------------------------------------------------------------------------------

  const jsonLines = {
    line: (key, value) => JSON.stringify([key, value]) + '\n',
    decode(bytes) {
      const lines = decodeText(bytes, 'JSON lines').split('\n');
      const records = [];
      for (let i = 0; i < lines.length; i++) {
        if (!lines[i].trim()) continue;
        let record;
        try {
          record = JSON.parse(lines[i]);
        } catch (e) {
          throw new Error(`JSON lines: line ${i + 1} is not valid JSON (${e.message})`);
        }
        if (!Array.isArray(record) || record.length !== 2) {
          throw new Error(`JSON lines: line ${i + 1} is not a 2-element [key, value] array`);
        }
        records.push(record);
      }
      return records;
    },
  };

  // --- CSV ------------------------------------------------------------------------------------------

  const BARE = /^(?:-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)$/;

  function csvField(value) {
    if (typeof value === 'string') return '"' + value.replace(/"/g, '""') + '"';
    if (value === null || value === undefined || typeof value === 'number' || typeof value === 'boolean') {
      return JSON.stringify(value ?? null);  // a non-finite number is null, as in JSON
    }
    return csvField(JSON.stringify(value) ?? 'null');
  }

  const csv = {
    line: (key, value) => csvField(key) + ',' + csvField(value) + '\r\n',
    decode(bytes) {
      const text = decodeText(bytes, 'CSV');
      const records = [];
      const n = text.length;
      let i = 0;
      for (let row = 1; i < n; row++) {
        const fields = [];
        for (;;) {
          if (text[i] === '"') {
            let value = '';
            for (let j = i + 1; ;) {
              const q = text.indexOf('"', j);
              if (q < 0) throw new Error(`CSV row ${row}: a quoted field is not closed`);
              value += text.slice(j, q);
              if (text[q + 1] === '"') { value += '"'; j = q + 2; } else { i = q + 1; break; }
            }
            if (i < n && text[i] !== ',' && text[i] !== '\n' && text[i] !== '\r') {
              throw new Error(`CSV row ${row}: text after a closing quote`);
            }
            fields.push(value);
          } else {
            let j = i;
            while (j < n && text[j] !== ',' && text[j] !== '\n' && text[j] !== '\r') j++;
            const raw = text.slice(i, j);
            if (raw.includes('"')) throw new Error(`CSV row ${row}: a quote inside an unquoted field`);
            fields.push(BARE.test(raw) ? JSON.parse(raw) : raw);
            i = j;
          }
          if (text[i] === ',') { i++; continue; }
          if (text[i] === '\r') {
            if (text[i + 1] !== '\n') throw new Error(`CSV row ${row}: a carriage return outside quotes`);
            i++;
          }
          i++;  // the line feed (or past the end)
          break;
        }
        if (fields.length !== 2) throw new Error(`CSV row ${row}: expected 2 fields (key,value), got ${fields.length}`);
        records.push(fields);
      }
      return records;
    },
  };

  // Text formats buffer one string per record and encode them to UTF-8 once.
  function textEncoder(format) {
    let parts = [];
    return {
      records: 0,
      size: 0,  // UTF-16 code units: the buffered size, close to the encoded one
      add(key, value) {
        const line = format.line(key, value);
        parts.push(line);
        this.records++;
        this.size += line.length;
      },
      finish() {
        const bytes = utf8Encode(parts.join(''));
        parts = [];
        this.records = this.size = 0;
        return bytes;
      },
    };
  }

  // --- BSON -----------------------------------------------------------------------------------------

  class Writer {
    constructor() { this.reset(); }
    reset() { this.bytes = new Uint8Array(1024); this.view = new DataView(this.bytes.buffer); this.length = 0; }
    reserve(n) {
      if (this.length + n <= this.bytes.length) return;
      const bigger = new Uint8Array(Math.max(this.bytes.length * 2, this.length + n));
      bigger.set(this.bytes.subarray(0, this.length));
      this.bytes = bigger;
      this.view = new DataView(bigger.buffer);
    }
    u8(v) { this.reserve(1); this.bytes[this.length++] = v; }
    i32(v) { this.reserve(4); this.view.setInt32(this.length, v, true); this.length += 4; }
    i64(v) {
      if (BigInt.asIntN(64, v) !== v) throw new RangeError(`BSON: ${v} does not fit in int64`);
      this.reserve(8);
      this.view.setBigInt64(this.length, v, true);
      this.length += 8;
    }
    f64(v) { this.reserve(8); this.view.setFloat64(this.length, v, true); this.length += 8; }
    raw(bytes) { this.reserve(bytes.length); this.bytes.set(bytes, this.length); this.length += bytes.length; }
    cstring(s) {
      const bytes = utf8Encode(s);
      if (bytes.includes(0)) throw new Error(`BSON: a field name contains a NUL character: ${JSON.stringify(s)}`);
      this.raw(bytes);
      this.u8(0);
    }
    string(s) { const bytes = utf8Encode(s); this.i32(bytes.length + 1); this.raw(bytes); this.u8(0); }
    binary(v) {
      const bytes = v instanceof ArrayBuffer ? new Uint8Array(v) : new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
      this.i32(bytes.length);
      this.u8(0);
      this.raw(bytes);
    }
    document(entries, depth = 0) {
      if (depth > MAX_DEPTH) throw new Error(`BSON: nesting deeper than ${MAX_DEPTH}`);
      const start = this.length;
      this.i32(0);
      for (const [name, value] of entries) {
        const v = value !== null && typeof value === 'object' && typeof value.toJSON === 'function' ? value.toJSON() : value;
        const type = BSON_TYPES.find(t => t.encodes(v));
        if (!type) throw new TypeError(`BSON: cannot encode a value of type ${typeof v}`);
        this.u8(type.code);
        this.cstring(name);
        type.write(this, v, depth);
      }
      this.u8(0);
      this.view.setInt32(start, this.length - start, true);
    }
  }

  class Reader {
    constructor(bytes) { this.bytes = bytes; this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength); this.pos = 0; }
    need(n, what) {
      if (this.pos + n > this.bytes.length) {
        throw new Error(`BSON: truncated ${what} at offset ${this.pos} (needs ${n} bytes, ${this.bytes.length - this.pos} left)`);
      }
    }
    u8(what = 'byte') { this.need(1, what); return this.bytes[this.pos++]; }
    i32(what = 'int32') { this.need(4, what); const v = this.view.getInt32(this.pos, true); this.pos += 4; return v; }
    i64() { this.need(8, 'int64'); const v = this.view.getBigInt64(this.pos, true); this.pos += 8; return v; }
    f64() { this.need(8, 'double'); const v = this.view.getFloat64(this.pos, true); this.pos += 8; return v; }
    take(n, what) { this.need(n, what); return this.bytes.subarray(this.pos, this.pos += n); }
    cstring() {
      const end = this.bytes.indexOf(0, this.pos);
      if (end < 0) throw new Error(`BSON: truncated field name at offset ${this.pos}`);
      return decodeText(this.take(end - this.pos + 1, 'field name').subarray(0, -1), 'BSON field name');
    }
    string() {
      const at = this.pos;
      const length = this.i32('string length');
      if (length < 1) throw new Error(`BSON: bad string length ${length} at offset ${at}`);
      const bytes = this.take(length, 'string');
      if (bytes[length - 1] !== 0) throw new Error(`BSON: string at offset ${at} does not end with NUL`);
      return decodeText(bytes.subarray(0, -1), 'BSON string');
    }
    binary() {
      const at = this.pos;
      const length = this.i32('binary length');
      if (length < 0) throw new Error(`BSON: bad binary length ${length} at offset ${at}`);
      this.u8('binary subtype');
      return this.take(length, 'binary').slice();
    }
    // Calls fn(name, value) for each element of a document.
    elements(fn, depth = 0) {
      if (depth > MAX_DEPTH) throw new Error(`BSON: nesting deeper than ${MAX_DEPTH}`);
      const start = this.pos;
      const size = this.i32('document size');
      if (size < 5) throw new Error(`BSON: bad document size ${size} at offset ${start}`);
      this.need(size - 4, 'document');
      const end = start + size - 1;
      while (this.pos < end) {
        const code = this.u8();
        if (code === 0) throw new Error(`BSON: document at offset ${start} does not end where its size says`);
        const type = BSON_BY_CODE.get(code);
        if (!type) {
          throw new Error(`BSON: unsupported element type 0x${code.toString(16).padStart(2, '0')} at offset ${this.pos - 1}`);
        }
        const name = this.cstring();
        fn(name, type.read(this, depth));
      }
      if (this.pos !== end || this.bytes[end] !== 0) throw new Error(`BSON: document at offset ${start} does not end where its size says`);
      this.pos = end + 1;
    }
  }

  const MAX_DEPTH = 100;
  const define = (object, name, value) =>
    Object.defineProperty(object, name, {value, enumerable: true, writable: true, configurable: true});

  // The element types of the subset, in the order the encoder tries them (first match wins).
  const BSON_TYPES = [
    {code: 0x0a, encodes: v => v === null || v === undefined, write() {}, read: () => null},
    {code: 0x08, encodes: v => typeof v === 'boolean', write: (w, v) => w.u8(v ? 1 : 0), read: r => r.u8('boolean') !== 0},
    {
      code: 0x10,
      encodes: v => Number.isInteger(v) && v >= -0x80000000 && v <= 0x7fffffff && !Object.is(v, -0),
      write: (w, v) => w.i32(v),
      read: r => r.i32(),
    },
    {code: 0x01, encodes: v => typeof v === 'number', write: (w, v) => w.f64(v), read: r => r.f64()},
    {code: 0x12, encodes: v => typeof v === 'bigint', write: (w, v) => w.i64(v), read: r => Number(r.i64())},
    {code: 0x02, encodes: v => typeof v === 'string', write: (w, v) => w.string(v), read: r => r.string()},
    {code: 0x05, encodes: v => v instanceof ArrayBuffer || ArrayBuffer.isView(v), write: (w, v) => w.binary(v), read: r => r.binary()},
    {
      code: 0x04,
      encodes: Array.isArray,
      write: (w, v, depth) => w.document(Array.from(v, (x, i) => [String(i), x]), depth + 1),
      read: (r, depth) => { const out = []; r.elements((_, x) => out.push(x), depth + 1); return out; },
    },
    {
      code: 0x03,
      encodes: v => typeof v === 'object',
      write: (w, v, depth) => w.document(Object.entries(v), depth + 1),
      read: (r, depth) => { const out = {}; r.elements((name, x) => define(out, name, x), depth + 1); return out; },
    },
  ];
  const BSON_BY_CODE = new Map(BSON_TYPES.map(t => [t.code, t]));

  function bsonEncoder() {
    const writer = new Writer();
    return {
      records: 0,
      size: 0,
      add(key, value) {
        const start = writer.length;
        try {
          writer.document([['k', key], ['v', value]]);
        } catch (e) {
          writer.length = start;  // no half record in the blob if the caller goes on
          throw e;
        }
        this.records++;
        this.size = writer.length;
      },
      finish() {
        const bytes = writer.bytes.slice(0, writer.length);
        writer.reset();
        this.records = this.size = 0;
        return bytes;
      },
    };
  }

  function bsonDecode(bytes) {
    const reader = new Reader(bytes);
    const records = [];
    while (reader.pos < bytes.length) {
      const at = reader.pos;
      const doc = {};
      reader.elements((name, value) => define(doc, name, value));
      if (!Object.hasOwn(doc, 'k') || !Object.hasOwn(doc, 'v')) {
        throw new Error(`BSON: the document at offset ${at} is not a record (needs fields k and v)`);
      }
      records.push([doc.k, doc.v]);
    }
    return records;
  }

  // --- the shuffle format --------------------------------------------------------------------------
  //
  // Stage outputs a user does not read travel between the tabs in a compact binary form with the
  // meaning of JSON lines (what JSON.stringify then JSON.parse of each [key, value] gives): an
  // output that feeds a reduce keeps each key once with all its values (GROUPS), others keep the
  // records in order (RECORDS). Columns, so that most of the work is done by native code:
  //   header  "PMRS" u8 version(1) u8 layout(1 records, 2 groups) u16 0,
  //           u32 entries, tags, varint bytes, floats, text bytes (little-endian)
  //   tags    a byte per value (and per record key): the value's kind, KIND below
  //   varints LEB128: zigzag int32 values, string and JSON lengths (UTF-16 units), a group's key
  //           length and value count, in reading order
  //   floats  float64 values
  //   text    every string, key and JSON text, concatenated, as one UTF-8 block
  // A group is its key (a value: a string) and a varint count of values, among which REPEAT, a
  // varint n and a string, number, boolean or null, stands for n of that value; a record is two
  // values. Strings that are not well-formed UTF-16 go as JSON text, which escapes lone surrogates.
  const SHUFFLE_TYPE = 'application/x-peermr-shuffle';  // task-assign's content type for it
  const SHUFFLE_MAGIC = 0x53524d50;  // "PMRS"
  const SHUFFLE_HEADER = 28;
  const KIND = {null: 0, false: 1, true: 2, int: 3, float: 4, string: 5, json: 6, repeat: 7};
  const RECORDS = 1;
  const GROUPS = 2;

  // A value that is not a string, number, boolean or null, as its JSON text, taken at the emit.
  class JsonText {
    constructor(text) { this.text = text; }
  }

  // A key's values while they are all one string, number, boolean or null (a word count's 1s): a
  // count instead of an array, the cheapest thing to keep per emit.
  class Same {
    constructor(value) { this.value = value; this.count = 1; }
  }

  // The values of a group as an array (values: an array, or a Same).
  const valuesOf = values => (Array.isArray(values) ? values : new Array(values.count).fill(values.value));

  // Groups by key name: a null-prototype object, name -> an array or a Same. Not a Map: a map task
  // looks up every word it emits, each a string just split from a text, and V8 finds an object's
  // property by such a string faster than a Map's key (bench/wordcount.py: the word count's map phase 11 % shorter).
  const groups = () => Object.create(null);

  // Adds a plain value to the group `name` of groups; true when the group is new.
  function addToGroup(groups, name, v) {
    const values = groups[name];
    if (values === undefined) {
      groups[name] = v !== null && typeof v === 'object' ? [v] : new Same(v);
      return true;
    }
    if (Array.isArray(values)) {
      values.push(v);
    } else if (values.value === v) {
      values.count++;
    } else {
      const all = valuesOf(values);
      all.push(v);
      groups[name] = all;
    }
    return false;
  }

  // Adds a group's values (an array or a Same) after those merged already holds for its name (a
  // reduce's input from several pieces, in groups()). Counts of one value add up.
  function mergeGroup(merged, name, values) {
    const had = merged[name];
    if (had === undefined) {
      merged[name] = values;
    } else if (!Array.isArray(had) && !Array.isArray(values) && had.value === values.value) {
      had.count += values.count;
    } else {
      const all = valuesOf(had);
      if (Array.isArray(values)) {
        for (let i = 0; i < values.length; i++) all.push(values[i]);
      } else {
        const from = all.length;
        all.length = from + values.count;
        all.fill(values.value, from);
      }
      if (all !== had) merged[name] = all;
    }
  }

  // groups() as the keyToValues a reduce gets, in place: an ordinary object whose own properties
  // are the names (a name "__proto__" too), each with its values as an array (each(values) of them).
  function keyToValues(groups, each = valuesOf) {
    for (const name in groups) groups[name] = each(groups[name]);
    return Object.setPrototypeOf(groups, Object.prototype);
  }

  // A value as JSON would keep it: a primitive, or JsonText for the rest.
  function plain(value) {
    switch (typeof value) {
      case 'string': return value.isWellFormed() ? value : new JsonText(JSON.stringify(value));
      case 'number': return Number.isFinite(value) ? value : null;
      case 'boolean': return value;
      case 'object': {
        if (value === null) return null;
        const text = JSON.stringify(value);
        if (text === undefined) return null;
        return text.charCodeAt(0) === 34 ? plain(JSON.parse(text)) : new JsonText(text);  // a toJSON string
      }
      case 'bigint': return JSON.stringify(value);  // throws as JSON lines would
      default: return null;  // undefined, functions and symbols are null in a JSON array
    }
  }

  // The name a reduce sees a key under (keyString of what JSON lines would give back).
  function groupName(key) {
    if (typeof key === 'string') return key;
    const text = JSON.stringify(key);
    if (text === undefined) return 'null';
    return text.charCodeAt(0) === 34 ? JSON.parse(text) : text;
  }

  // Rough bytes of a plain value in the shuffle format: what bounds memory between flushes.
  function plainSize(v) {
    if (typeof v === 'string') return v.length + 2;
    if (typeof v === 'number') return 5;
    return v instanceof JsonText ? v.text.length + 2 : 1;
  }

  class Column {
    constructor(bytes = 256) { this.bytes = new Uint8Array(bytes); this.length = 0; }
    grow(n) {
      if (this.length + n <= this.bytes.length) return;
      const bigger = new Uint8Array(Math.max(this.bytes.length * 2, this.length + n));
      bigger.set(this.bytes.subarray(0, this.length));
      this.bytes = bigger;
    }
    u8(v) { if (this.length === this.bytes.length) this.grow(1); this.bytes[this.length++] = v; }
    varint(v) {  // v: 0 to 2**32 - 1
      this.grow(5);
      while (v > 127) { this.bytes[this.length++] = (v & 127) | 128; v >>>= 7; }
      this.bytes[this.length++] = v;
    }
  }

  class ShuffleWriter {
    constructor(layout) {
      this.layout = layout;
      this.entries = 0;
      this.records = 0;  // values of groups, or records
      this.tags = new Column();
      this.varints = new Column();
      this.floats = [];
      this.text = [];
    }
    string(s) { this.varints.varint(s.length); this.text.push(s); }
    value(v) {
      if (typeof v === 'number') {
        if ((v | 0) === v) {
          this.tags.u8(KIND.int);
          this.varints.varint(((v << 1) ^ (v >> 31)) >>> 0);
        } else {
          this.tags.u8(KIND.float);
          this.floats.push(v);
        }
      } else if (typeof v === 'string') {
        this.tags.u8(KIND.string);
        this.string(v);
      } else if (v === null) {
        this.tags.u8(KIND.null);
      } else if (v === true || v === false) {
        this.tags.u8(v ? KIND.true : KIND.false);
      } else {
        this.tags.u8(KIND.json);
        this.string(v.text);
      }
    }
    // A record (RECORDS): key and value as plain() gives them.
    record(key, value) { this.value(key); this.value(value); this.entries++; this.records++; }
    // A group (GROUPS): a key name and its plain values (an array, or a Same).
    group(name, values) {
      this.value(plain(name));
      if (Array.isArray(values)) {
        this.varints.varint(values.length);
        for (let i = 0; i < values.length; i++) this.value(values[i]);
        this.records += values.length;
      } else {
        this.varints.varint(values.count);
        this.tags.u8(KIND.repeat);
        this.varints.varint(values.count);
        this.value(values.value);
        this.records += values.count;
      }
      this.entries++;
    }
    finish() {
      const text = utf8Encode(this.text.join(''));
      const tags = this.tags.length;
      const varints = this.varints.length;
      const out = new Uint8Array(SHUFFLE_HEADER + tags + varints + 8 * this.floats.length + text.length);
      const view = new DataView(out.buffer);
      view.setUint32(0, SHUFFLE_MAGIC, true);
      out[4] = 1;
      out[5] = this.layout;
      [this.entries, tags, varints, this.floats.length, text.length].forEach((n, i) => view.setUint32(8 + 4 * i, n, true));
      let at = SHUFFLE_HEADER;
      out.set(this.tags.bytes.subarray(0, tags), at);
      out.set(this.varints.bytes.subarray(0, varints), at += tags);
      at += varints;
      for (const f of this.floats) { view.setFloat64(at, f, true); at += 8; }
      out.set(text, at);
      return out;
    }
  }

  class ShuffleReader {
    constructor(bytes) {
      const fail = why => { throw new Error(`shuffle data: ${why}`); };
      if (bytes.length < SHUFFLE_HEADER) fail('shorter than its header');
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      if (view.getUint32(0, true) !== SHUFFLE_MAGIC || bytes[4] !== 1) fail('not version 1 of the format');
      this.layout = bytes[5];
      if (this.layout !== RECORDS && this.layout !== GROUPS) fail(`unknown layout ${this.layout}`);
      const [entries, tags, varints, floats, text] = [0, 1, 2, 3, 4].map(i => view.getUint32(8 + 4 * i, true));
      if (SHUFFLE_HEADER + tags + varints + 8 * floats + text !== bytes.length) fail('its sections do not add up to its size');
      this.entries = entries;
      this.tags = bytes.subarray(SHUFFLE_HEADER, SHUFFLE_HEADER + tags);
      this.varints = bytes.subarray(SHUFFLE_HEADER + tags, SHUFFLE_HEADER + tags + varints);
      this.floats = new DataView(bytes.buffer, bytes.byteOffset + SHUFFLE_HEADER + tags + varints, 8 * floats);
      this.text = decodeText(bytes.subarray(bytes.length - text), 'shuffle data');
      this.t = this.v = this.f = this.s = 0;
      this.fail = fail;
    }
    varint() {
      let v = 0;
      for (let shift = 0; shift < 35; shift += 7) {
        if (this.v >= this.varints.length) this.fail('truncated numbers');
        const b = this.varints[this.v++];
        v += (b & 127) * 2 ** shift;
        if (b < 128) return v;
      }
      return this.fail('a number over 35 bits');
    }
    string() {
      const length = this.varint();
      if (this.s + length > this.text.length) this.fail('truncated text');
      return this.text.slice(this.s, this.s += length);
    }
    value() {
      if (this.t >= this.tags.length) this.fail('truncated values');
      switch (this.tags[this.t++]) {
        case KIND.int: { const z = this.varint(); return z % 2 ? -(z + 1) / 2 : z / 2; }
        case KIND.string: return this.string();
        case KIND.null: return null;
        case KIND.true: return true;
        case KIND.false: return false;
        case KIND.float:
          if (8 * this.f >= this.floats.byteLength) this.fail('truncated floats');
          return this.floats.getFloat64(8 * this.f++, true);
        case KIND.json: {
          const text = this.string();
          try {
            return JSON.parse(text);
          } catch (e) {
            return this.fail(`a value is not valid JSON (${e.message})`);
          }
        }
        default: return this.fail(`unknown value kind ${this.tags[this.t - 1]}`);
      }
    }
    // Calls fn(key, value) for each record, or fn(name, values) for each group: an array, or a Same
    // for a group that is one repeat of one value (a word count's 1s), so that a reduce can add up
    // counts instead of building arrays it would join.
    each(fn) {
      for (let i = 0; i < this.entries; i++) {
        if (this.layout === RECORDS) {
          fn(this.value(), this.value());
        } else {
          const name = this.value();
          if (typeof name !== 'string') this.fail('a group key that is not a string');
          const count = this.varint();
          let values = [];
          while (values.length < count) {
            if (this.tags[this.t] !== KIND.repeat) {
              values.push(this.value());
              continue;
            }
            this.t++;
            const n = this.varint();
            if (n > count - values.length) this.fail('a repeat past its group\'s count');
            const value = this.value();
            if (value !== null && typeof value === 'object') this.fail('a repeated value that is not a string, number, boolean or null');
            if (n === count) {  // the whole group
              values = new Same(value);
              values.count = count;
              break;
            }
            values.length += n;
            values.fill(value, values.length - n);
          }
          fn(name, values);
        }
      }
      if (this.t !== this.tags.length || this.v !== this.varints.length || this.s !== this.text.length ||
        8 * this.f !== this.floats.byteLength) {
        this.fail('data left over after its last entry');
      }
    }
  }

  // The incremental encoder of the shuffle format's RECORDS layout (the FORMATS interface).
  function shuffleEncoder() {
    let writer = new ShuffleWriter(RECORDS);
    return {
      records: 0,
      size: 0,
      add(key, value) {
        const k = plain(key);
        const v = plain(value);
        writer.record(k, v);
        this.records++;
        this.size += plainSize(k) + plainSize(v);
      },
      finish() {
        const bytes = writer.finish();
        writer = new ShuffleWriter(RECORDS);
        this.records = this.size = 0;
        return bytes;
      },
    };
  }

  const shuffle = {
    TYPE: SHUFFLE_TYPE, RECORDS, GROUPS, plain, plainSize, groupName, Same, valuesOf,
    groups, addToGroup, mergeGroup, keyToValues,
    // A plain value as job code sees it.
    value: v => (v instanceof JsonText ? JSON.parse(v.text) : v),
    writer: layout => new ShuffleWriter(layout),
    // Shuffle data, gzipped or not (else JSON lines a run saved before the format existed).
    holds: bytes => (bytes[0] === 0x1f && bytes[1] === 0x8b) ||
      (bytes.length >= 4 && new DataView(bytes.buffer, bytes.byteOffset, 4).getUint32(0, true) === SHUFFLE_MAGIC),
    // Records ([key, value]) in order, or groups ([name, values]) in order; with {same: true} a
    // group of one repeated value comes as a Same (value, count) instead of an array.
    decode(bytes, {same = false} = {}) {
      const out = [];
      const pair = (a, b) => out.push([a, b]);
      return {layout: shuffle.each(bytes, pair, pair, {same}), entries: out};
    },
    // Calls record(key, value) for each record, or group(name, values) for each group (an array; with
    // {same: true}, a Same for a group of one repeated value), as they are read; returns the layout.
    // Damaged data throws, maybe after some calls.
    each(bytes, record, group, {same = false} = {}) {
      const reader = new ShuffleReader(asBytes(bytes));
      if (reader.layout === RECORDS) reader.each(record);
      else reader.each(same ? group : (name, values) => group(name, Array.isArray(values) ? values : valuesOf(values)));
      return reader.layout;
    },
    // Records as JSON lines would give them, whatever the layout (a group's values in order).
    records(bytes) {
      const {layout, entries} = shuffle.decode(bytes);
      if (layout === RECORDS) return entries;
      const records = [];
      for (const [name, values] of entries) for (const value of values) records.push([name, value]);
      return records;
    },
  };

  // --- the content types ----------------------------------------------------------------------------

  const FORMATS = {
    'application/json': {encoder: () => textEncoder(jsonLines), decode: jsonLines.decode},
    'text/csv': {encoder: () => textEncoder(csv), decode: csv.decode},
    'application/bson': {encoder: bsonEncoder, decode: bsonDecode},
    [SHUFFLE_TYPE]: {encoder: shuffleEncoder, decode: bytes => shuffle.records(bytes)},
  };

  function format(contentType) {
    const found = FORMATS[String(contentType).split(';')[0].trim().toLowerCase()];
    if (!found) throw new Error(`unsupported content type: ${contentType}`);
    return found;
  }

  function asBytes(data) {
    if (data instanceof Uint8Array) return data;
    if (data instanceof ArrayBuffer) return new Uint8Array(data);
    if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    throw new TypeError('decode needs an ArrayBuffer or a typed array');
  }

  globalThis.peermrCodecs = {
    // An incremental encoder of one blob: add(key, value), then records, size (bytes buffered, about) and finish() -> Uint8Array.
    encoder: contentType => format(contentType).encoder(),
    encode(contentType, records) {
      const encoder = format(contentType).encoder();
      for (const [key, value] of records) encoder.add(key, value);
      return encoder.finish();
    },
    decode: (contentType, bytes) => format(contentType).decode(asBytes(bytes)),
    partitionOf,
    keyString,
    shuffle,
  };
})();
