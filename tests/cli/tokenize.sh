#!/usr/bin/env bash
# `zt tokenize`: for the Llama 2 and BERT fixture tokenizers, the ids of every hard case (with
# and without special tokens) and the decoded text equal what the tokenizers library gave when
# the fixtures were made (tests/fixtures/tokenizers/*/expected.jsonl); bad lines are one error
# naming stdin:LINE.
# Usage: tokenize.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
src=$2
fx=$src/tests/fixtures/tokenizers
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }

# field FILE KEY: that key of every line of FILE, one JSON value per line.
field() { python3 -c 'import json,sys
for l in open(sys.argv[1]): print(json.dumps(json.loads(l)[sys.argv[2]], ensure_ascii=False))' "$1" "$2"; }

for kind in llama2 bert; do
  e=$fx/$kind/expected.jsonl
  field "$e" text >"$tmp/text"
  field "$e" ids >"$tmp/want_ids"
  field "$e" ids_special >"$tmp/want_special"
  field "$e" decoded >"$tmp/want_decoded"
  field "$e" decoded_skip >"$tmp/want_skip"
  # Compare as parsed JSON (spacing differs between writers).
  same() { python3 -c 'import json,sys
a=[json.loads(l) for l in open(sys.argv[1])]; b=[json.loads(l) for l in open(sys.argv[2])]
sys.exit(0 if a==b and len(a)>50 else 1)' "$1" "$2"; }
  "$zt" tokenize --tokenizer "$fx/$kind" <"$tmp/text" >"$tmp/ids" 2>"$tmp/err" || bad "$kind encode: $(cat "$tmp/err")"
  same "$tmp/ids" "$tmp/want_ids" && ok "$kind: ids equal the library's" || bad "$kind: ids differ"
  "$zt" tokenize --tokenizer "$fx/$kind/tokenizer.json" --add-special-tokens <"$tmp/text" >"$tmp/ids_s" 2>"$tmp/err" ||
    bad "$kind encode special: $(cat "$tmp/err")"
  same "$tmp/ids_s" "$tmp/want_special" && ok "$kind: ids with special tokens" || bad "$kind: special ids differ"
  "$zt" tokenize --tokenizer "$fx/$kind" --decode <"$tmp/want_ids" >"$tmp/dec" 2>"$tmp/err" || bad "$kind decode: $(cat "$tmp/err")"
  same "$tmp/dec" "$tmp/want_decoded" && ok "$kind: decoded text" || bad "$kind: decoded text differs"
  "$zt" tokenize --tokenizer "$fx/$kind" --decode --skip-special-tokens <"$tmp/want_special" >"$tmp/dec_s" 2>"$tmp/err" ||
    bad "$kind decode skip: $(cat "$tmp/err")"
  same "$tmp/dec_s" "$tmp/want_skip" && ok "$kind: decoded text without special tokens" || bad "$kind: skip decode differs"
done

# Objects with "text" work; the byte tokenizer needs no file.
got=$(echo '{"text": "hi"}' | "$zt" tokenize --tokenizer bytes)
[ "$got" = "[104,105]" ] && ok "bytes: {\"text\": ...}" || bad "bytes: got '$got'"

expect_error() {  # name, text the message must contain, stdin, args...
  local name=$1 want=$2 input=$3; shift 3
  local out rc
  out=$(printf '%s' "$input" | "$zt" "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && [[ "$out" == *"$want"* ]]; then
    ok "$name"
  else
    bad "$name: exit $rc: $out"
  fi
}
expect_error "not JSON names the line" "stdin:2" $'"a"\nnot json\n' tokenize --tokenizer bytes
expect_error "a missing key" "\"text\"" $'{"body": "x"}\n' tokenize --tokenizer bytes
expect_error "an id past the vocabulary" "stdin:1" $'[1, 999999]\n' tokenize --tokenizer "$fx/bert" --decode
expect_error "a missing tokenizer" "does not exist" $'"a"\n' tokenize --tokenizer "$tmp/none.json"
printf '{"model": {"type": "Unigram", "vocab": []}}' >"$tmp/uni.json"
expect_error "an unsupported model" "'Unigram'" $'"a"\n' tokenize --tokenizer "$tmp/uni.json"
expect_error "no tokenizer" "--tokenizer" $'"a"\n' tokenize

[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failure(s)"; exit 1; }
