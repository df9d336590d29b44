#!/usr/bin/env python3
"""make_wmt16_fixtures.py OUT_DIR: small synthetic copies of the three WMT16 ro-en downloads (same archive
layout and member names as the real ones) with the corner cases of HF's wmt16 builder, and the splits that
builder's rules give for them, as OUT_DIR/expected/{train,validation,test}.jsonl. Also OUT_DIR/sums.txt:
"name sha256 size" per archive. The expected splits follow the builder's documented rules (written here
independently): europarl lines zipped and right-stripped; TMX <tu> -> {xml:lang: <seg> text} with
ElementTree; SGML lines matching <seg id="N">(.*)</seg> at the line start; empty sides dropped."""
import gzip, hashlib, io, json, os, re, sys, zipfile
import xml.etree.ElementTree as ET

out = sys.argv[1]
os.makedirs(os.path.join(out, "expected"), exist_ok=True)
ep_ro = "Prima linie\nA doua linie  \t\r\n\nspatiu final\u00a0\n   \nlinie in plus ro\n"
ep_en = "First line\nSecond line\r\nnot dropped on the en side\nfinal space \n x \n"
tmx = ('<?xml version="1.0" encoding="utf-8"?>\n<tmx version="1.4"><header/><body>\n'
       '<tu><tuv xml:lang="en"><seg>Tom &amp; Jerry &lt;3</seg></tuv><tuv xml:lang="ro"><seg>Tom &#x219;i Jerry</seg></tuv></tu>\n'
       '<tu><tuv xml:lang="en"><seg></seg></tuv><tuv xml:lang="ro"><seg>gol</seg></tuv></tu>\n'
       '<tu>\n <tuv xml:lang="en"><seg>  leading kept\r\nsecond line</seg></tuv>\n <tuv xml:lang="ro"><seg>ro &quot;x&quot;</seg></tuv>\n</tu>\n'
       '</body></tmx>\n')
sgm_src = ('<srcset setid="newsdev2016" srclang="any">\n<doc docid="1" genre="news">\n'
           '<seg id="1">Prima &quot;propozitie&quot;</seg>\n <seg id="2">indented: skipped</seg>\n'
           '<seg id="3">a</seg> b </seg>\r\n<seg id="4"></seg>\n<seg id="5">ultima</seg>\n</doc>\n</srcset>\n')
sgm_ref = ('<refset setid="newsdev2016" srclang="any">\n<doc docid="1" genre="news">\n'
           '<seg id="1">First &quot;sentence&quot;</seg>\n<seg id="3">c</seg>\n<seg id="4">d</seg>\n'
           '<seg id="5">last</seg>\n</doc>\n</refset>\n')
test_src = '<seg id="1">Test ro</seg>\n<seg id="2">Al doilea</seg>\n'
test_ref = '<seg id="1">Test en</seg>\n<seg id="2">Second</seg>\n'

def zbytes(members):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members:
            z.writestr(name, data)
    return b.getvalue()

files = {
    "training-parallel-ep-v8.zip": zbytes([("training-parallel-ep-v8/europarl-v8.ro-en.ro", ep_ro.encode()),
                                           ("training-parallel-ep-v8/europarl-v8.ro-en.en", ep_en.encode()),
                                           ("training-parallel-ep-v8/europarl-v8.fi-en.fi", b"x\n")]),
    "en-ro.tmx.gz": gzip.compress(tmx.encode()),
    "dev.zip": zbytes([("dev/newsdev2016-roen-src.ro.sgm", sgm_src.encode()),
                       ("dev/newsdev2016-roen-ref.en.sgm", sgm_ref.encode()),
                       ("dev/newstest2016-roen-src.ro.sgm", test_src.encode()),
                       ("dev/newstest2016-roen-ref.en.sgm", test_ref.encode())]),
}
with open(os.path.join(out, "sums.txt"), "w") as f:
    for name, data in files.items():
        with open(os.path.join(out, name), "wb") as g:
            g.write(data)
        f.write("%s %s %d\n" % (name, hashlib.sha256(data).hexdigest(), len(data)))

def keep(ex):
    return all(ex.values())

train = []
for a, b in zip(io.BytesIO(ep_ro.encode()), io.BytesIO(ep_en.encode())):
    ex = {"ro": a.decode().rstrip(), "en": b.decode().rstrip()}
    if keep(ex): train.append(ex)
for _, el in ET.iterparse(io.BytesIO(tmx.encode())):
    if el.tag == "tu":
        ex = {}
        for tuv in el.iterfind("tuv"):
            lang = [v for k, v in tuv.items() if k.endswith("}lang")][0]
            ex[lang] = tuv.findall("seg")[0].text
        if keep(ex): train.append(ex)

def sgm(text):
    r = re.compile(r"<seg id=\"\d+\">(.*)</seg>")
    for line in io.StringIO(text, newline=None):
        m = re.match(r, line)
        if m: yield m.groups()[0]

def par(a, b):
    return [ex for ex in ({"ro": x, "en": y} for x, y in zip(sgm(a), sgm(b))) if keep(ex)]

for name, rows in (("train", train), ("validation", par(sgm_src, sgm_ref)), ("test", par(test_src, test_ref))):
    with open(os.path.join(out, "expected", name + ".jsonl"), "w") as f:
        for ex in rows:
            f.write(json.dumps({"translation": {"en": ex["en"], "ro": ex["ro"]}}, ensure_ascii=False) + "\n")
