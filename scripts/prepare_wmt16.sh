#!/usr/bin/env bash
# prepare_wmt16.sh [OUT_DIR]: downloads WMT16 ro-en (what HF `datasets` calls wmt16 / ro-en) and
# lays it out for `t5train --dataset wmt16-ro-en`:
#
#   OUT_DIR/wmt16-ro-en/train.{en,ro}       Europarl v8 ro-en + SETimes2 en-ro (HF's split has
#                                           610,320 pairs; t5train skips pairs with an empty side)
#   OUT_DIR/wmt16-ro-en/validation.{en,ro}  newsdev2016 (1999 pairs)
#   OUT_DIR/wmt16-ro-en/test.{en,ro}        newstest2016 (1999 pairs)
#
# OUT_DIR defaults to ~/.cache/t5train/data, one of the places t5train looks (then --data_dir,
# $T5TRAIN_DATA). Needs internet, curl or wget, tar, unzip. Downloads are kept in
# OUT_DIR/downloads and not fetched twice. Not run by the tests (they only `bash -n` it).
set -euo pipefail

OUT=${1:-${HOME}/.cache/t5train/data}
DL="$OUT/downloads"
DST="$OUT/wmt16-ro-en"
EP_URL=${EP_URL:-https://data.statmt.org/wmt16/translation-task/training-parallel-ep-v8.tgz}
SETIMES_URL=${SETIMES_URL:-https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip}
DEV_URL=${DEV_URL:-https://data.statmt.org/wmt16/translation-task/dev-romanian-updated.tgz}
TEST_URL=${TEST_URL:-https://data.statmt.org/wmt16/translation-task/test.tgz}

die() { echo "prepare_wmt16.sh: error: $*" >&2; exit 1; }
for t in tar unzip sed; do command -v "$t" >/dev/null || die "'$t' is needed (apt-get install $t)"; done
if command -v curl >/dev/null; then fetch() { curl -fL --retry 3 -o "$2.part" "$1" && mv "$2.part" "$2"; }
elif command -v wget >/dev/null; then fetch() { wget -q -O "$2.part" "$1" && mv "$2.part" "$2"; }
else die "curl or wget is needed"; fi

mkdir -p "$DL" "$DST"
get() {  # get URL FILE
  if [ -s "$DL/$2" ]; then echo "have $DL/$2"; return; fi
  echo "downloading $1"
  fetch "$1" "$DL/$2" || die "download failed: $1 (set ${3:-the URL variable} to a mirror)"
}
get "$EP_URL" training-parallel-ep-v8.tgz EP_URL
get "$SETIMES_URL" setimes2-en-ro.txt.zip SETIMES_URL
get "$DEV_URL" dev-romanian-updated.tgz DEV_URL
get "$TEST_URL" test.tgz TEST_URL

WORK="$DL/extracted"
mkdir -p "$WORK"
tar -xzf "$DL/training-parallel-ep-v8.tgz" -C "$WORK"
unzip -o -q "$DL/setimes2-en-ro.txt.zip" -d "$WORK/setimes2"
tar -xzf "$DL/dev-romanian-updated.tgz" -C "$WORK"
tar -xzf "$DL/test.tgz" -C "$WORK"

find_one() { local f; f=$(find "$WORK" -name "$1" | head -n 1); [ -n "$f" ] || die "$1 not found in the downloads"; echo "$f"; }
EP_EN=$(find_one 'europarl-v8.ro-en.en'); EP_RO=$(find_one 'europarl-v8.ro-en.ro')
ST_EN=$(find_one 'SETIMES.en-ro.en');     ST_RO=$(find_one 'SETIMES.en-ro.ro')

# train: concatenation, line-aligned (t5train skips pairs with an empty side and reports them)
cat "$EP_EN" "$ST_EN" > "$DST/train.en.tmp"
cat "$EP_RO" "$ST_RO" > "$DST/train.ro.tmp"
mv "$DST/train.en.tmp" "$DST/train.en"; mv "$DST/train.ro.tmp" "$DST/train.ro"

# SGML -> one segment per line, entities unescaped (&amp; last)
sgm2txt() {
  grep -i '<seg[ >]' "$1" | sed -e 's/^.*<seg[^>]*>//I' -e 's/<\/seg>.*$//I' \
    -e 's/&lt;/</g' -e 's/&gt;/>/g' -e 's/&quot;/"/g' -e "s/&apos;/'/g" -e 's/&amp;/\&/g' \
    -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//'
}
sgm2txt "$(find_one 'newsdev2016-enro-src.en.sgm')" > "$DST/validation.en"
sgm2txt "$(find_one 'newsdev2016-enro-ref.ro.sgm')" > "$DST/validation.ro"
sgm2txt "$(find_one 'newstest2016-enro-src.en.sgm')" > "$DST/test.en"
sgm2txt "$(find_one 'newstest2016-enro-ref.ro.sgm')" > "$DST/test.ro"

for s in train validation test; do
  a=$(wc -l < "$DST/$s.en"); b=$(wc -l < "$DST/$s.ro")
  [ "$a" -eq "$b" ] || die "$s.en has $a lines but $s.ro has $b"
  echo "$DST/$s.{en,ro}: $a lines"
done
echo "done: ./t5train --dataset wmt16-ro-en --data_dir $OUT ..."
