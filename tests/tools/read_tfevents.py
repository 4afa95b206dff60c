#!/usr/bin/env python3
"""Reads TensorBoard event files without TensorFlow, protobuf or generated code.

An independent check of soma's writer: it parses the TFRecord framing, verifies both masked
CRC-32C checksums of every record with its own CRC implementation, and decodes the Event /
Summary / HistogramProto messages from the protobuf wire format by hand, using TensorBoard's
field numbers.

Output: JSON Lines on stdout, one object per record kind:
  {"file": ..., "step": 0, "wall_time": ..., "file_version": "brain.Event:2"}
  {"file": ..., "step": 3, "wall_time": ..., "tag": "epoch_loss", "simple_value": 0.25}
  {"file": ..., "step": 3, "wall_time": ..., "tag": "dense/kernel",
   "histo": {"min": ..., "max": ..., "num": ..., "sum": ..., "sum_squares": ...,
             "bucket_limit": [...], "bucket": [...]}}
Errors (bad CRC, truncated record, malformed message) go to stderr and exit with status 1.

usage: read_tfevents.py FILE_OR_DIR...   (a directory means every *tfevents* file in it)
"""

import json
import os
import struct
import sys


class ReadError(Exception):
    pass


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc32c(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob, name):
    """Yields the data of each TFRecord in blob, checking both CRCs."""
    pos, index = 0, 0
    while pos < len(blob):
        if len(blob) - pos < 12:
            raise ReadError("%s: record %d: truncated header" % (name, index))
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if length_crc != masked_crc32c(header):
            raise ReadError("%s: record %d: CRC mismatch in the length" % (name, index))
        start = pos + 12
        if len(blob) - start < length + 4:
            raise ReadError("%s: record %d: truncated data" % (name, index))
        data = blob[start:start + length]
        (data_crc,) = struct.unpack("<I", blob[start + length:start + length + 4])
        if data_crc != masked_crc32c(data):
            raise ReadError("%s: record %d: CRC mismatch in the data" % (name, index))
        yield data
        pos = start + length + 4
        index += 1


def varint(buf, pos):
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ReadError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ReadError("varint too long")


def fields(buf):
    """Yields (field number, wire type, value) of a message; value is an int or bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ReadError("unsupported wire type %d (field %d)" % (wire, number))
        if pos > len(buf):
            raise ReadError("field %d runs past the end of its message" % number)
        yield number, wire, value


def as_double(raw):
    return struct.unpack("<d", raw)[0]


def as_float(raw):
    return struct.unpack("<f", raw)[0]


def as_int64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def doubles(wire, raw):
    """A repeated double: packed (wire type 2) or one element (wire type 1)."""
    if wire == 1:
        return [as_double(raw)]
    if len(raw) % 8:
        raise ReadError("packed doubles of %d bytes" % len(raw))
    return list(struct.unpack("<%dd" % (len(raw) // 8), raw))


def histogram(buf):
    h = {"min": 0.0, "max": 0.0, "num": 0.0, "sum": 0.0, "sum_squares": 0.0,
         "bucket_limit": [], "bucket": []}
    names = {1: "min", 2: "max", 3: "num", 4: "sum", 5: "sum_squares"}
    for number, wire, value in fields(buf):
        if number in names and wire == 1:
            h[names[number]] = as_double(value)
        elif number == 6:
            h["bucket_limit"] += doubles(wire, value)
        elif number == 7:
            h["bucket"] += doubles(wire, value)
    return h


def summary_values(buf):
    for number, wire, value in fields(buf):
        if number != 1 or wire != 2:
            continue
        out = {}
        for n, w, v in fields(value):
            if n == 1 and w == 2:
                out["tag"] = v.decode("utf-8")
            elif n == 2 and w == 5:
                out["simple_value"] = as_float(v)
            elif n == 5 and w == 2:
                out["histo"] = histogram(v)
        yield out


def events(path):
    with open(path, "rb") as f:
        blob = f.read()
    for data in records(blob, path):
        base = {"file": os.path.basename(path), "step": 0, "wall_time": 0.0}
        version, summary = None, None
        for number, wire, value in fields(data):
            if number == 1 and wire == 1:
                base["wall_time"] = as_double(value)
            elif number == 2 and wire == 0:
                base["step"] = as_int64(value)
            elif number == 3 and wire == 2:
                version = value.decode("utf-8")
            elif number == 5 and wire == 2:
                summary = value
        if version is not None:
            yield dict(base, file_version=version)
        if summary is not None:
            for v in summary_values(summary):
                yield dict(base, **v)


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    paths = []
    for arg in argv[1:]:
        if os.path.isdir(arg):
            paths += sorted(os.path.join(arg, f) for f in os.listdir(arg) if "tfevents" in f)
        else:
            paths.append(arg)
    try:
        for path in paths:
            for e in events(path):
                print(json.dumps(e))
    except (ReadError, OSError, UnicodeDecodeError) as err:
        sys.stderr.write("read_tfevents: %s\n" % err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
