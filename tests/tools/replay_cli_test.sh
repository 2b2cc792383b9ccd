#!/bin/sh
# tidepool-replay's command line, as a user meets it: one case per ctest
# test (tests/tools/CMakeLists.txt names them).
# Usage: replay_cli_test.sh CASE TIDEPOOL_REPLAY SAMPLE_TRACE VERSION
# Runs in a scratch directory of its own, so cases may run in parallel.
set -u
case_name="$1"
replay="$2"
sample="$3"
version="$4"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

fail() {
  echo "FAIL ($case_name): $*" >&2
  for f in *.err *.txt; do [ -f "$f" ] && { echo "--- $f" >&2; tail -5 "$f" >&2; }; done
  exit 1
}

case "$case_name" in
  lag)
    # --lag-us queues work behind each of tidepool's allocations; without it
    # a replay repeats exactly, and the baselines never see it.
    "$replay" --policy best_fit --policy pytorch_rules --frees device --lag-us 2 --json "$sample" > lag.jsonl 2> lag.err ||
      fail "--lag-us 2 exited $?"
    [ "$(grep -c '"lag_us":2' lag.jsonl)" -eq 2 ] || fail "lag_us is not in every line"
    grep -q '"failed_allocations":0' lag.jsonl || fail "a lagging replay refused allocations"
    "$replay" --policy best_fit --policy pytorch_rules --frees device --json "$sample" > a.jsonl || fail "no lag"
    "$replay" --policy best_fit --policy pytorch_rules --frees device --json "$sample" > b.jsonl || fail "no lag, again"
    sed 's/"ns_per_event":[^,]*,//' a.jsonl > a
    sed 's/"ns_per_event":[^,]*,//' b.jsonl > b
    cmp -s a b || fail "two replays without lag differ"
    grep -q '"lag_us":0' a.jsonl || fail "lag_us 0 is not said"
    grep pytorch_rules lag.jsonl | sed 's/"ns_per_event":[^,]*,//; s/"lag_us":[^,]*,//; s/"host_us":[^,]*,//' > lagged_baseline
    grep pytorch_rules a.jsonl | sed 's/"ns_per_event":[^,]*,//; s/"lag_us":[^,]*,//; s/"host_us":[^,]*,//' > baseline
    cmp -s lagged_baseline baseline || fail "the lag changed a baseline"
    for bad in -1 2000000 soon; do
      "$replay" --lag-us "$bad" "$sample" > /dev/null 2> bad.err
      [ $? -eq 2 ] || fail "--lag-us $bad was accepted"
      "$replay" --lag-us 2 --host-us "$bad" "$sample" > /dev/null 2> bad.err
      [ $? -eq 2 ] || fail "--host-us $bad was accepted"
    done
    # On the sim's virtual clock a lagging replay repeats exactly, in both
    # free modes, and a device that keeps up (the host slower per event than
    # the lag) is the replay without lag.
    grep -q '"host_us":1' lag.jsonl || fail "host_us is not said"
    for frees in device stream; do
      for run in 1 2; do
        "$replay" --policy best_fit --frees $frees --lag-us 50 --json "$sample" |
          sed 's/"ns_per_event":[^,]*,//g' > "lag50_$run" || fail "--lag-us 50 --frees $frees exited $?"
      done
      cmp -s lag50_1 lag50_2 || fail "two replays at --lag-us 50 --frees $frees differ"
    done
    "$replay" --policy best_fit --frees device --lag-us 2 --host-us 100 --json "$sample" |
      sed 's/"ns_per_event":[^,]*,//g; s/"lag_us":[^,]*,//; s/"host_us":[^,]*,//' > kept_up ||
      fail "--host-us 100 exited $?"
    grep best_fit a.jsonl | sed 's/"ns_per_event":[^,]*,//g; s/"lag_us":[^,]*,//; s/"host_us":[^,]*,//' > unlagged
    cmp -s kept_up unlagged || fail "a device that keeps up did not replay as no lag"
    "$replay" --policy best_fit --frees device --lag-us 2 --wall-clock --json "$sample" > wall.jsonl 2> wall.err ||
      fail "--wall-clock exited $?"
    grep -q '"host_us":null' wall.jsonl || fail "a wall-clock replay said a host time"
    grep -q '"failed_allocations":0' wall.jsonl || fail "a wall-clock replay refused allocations"

    ;;
  version)
    out=$("$replay" --version) || fail "--version exited $?"
    [ "$out" = "tidepool-replay $version" ] || fail "--version said \"$out\""
    ;;
  device_limit)
    # The config key's name and the old flag are one option; a size with no
    # unit under a page is refused with exit 2.
    "$replay" --policy best_fit --device-limit 200MiB --json "$sample" > new.jsonl || fail "--device-limit"
    "$replay" --policy best_fit --device-memory 200MiB --json "$sample" > old.jsonl || fail "--device-memory"
    grep -q '"failed_allocations":[1-9]' new.jsonl || fail "a 200MiB budget refused nothing"
    sed 's/"ns_per_event":[^,]*,//' new.jsonl > a
    sed 's/"ns_per_event":[^,]*,//' old.jsonl > b
    cmp -s a b || fail "the two names gave different results"
    "$replay" --device-limit 8 "$sample" > /dev/null 2> bad.err
    [ $? -eq 2 ] || fail "--device-limit 8 was accepted"
    grep -q -- '--device-limit: bad size' bad.err || fail "no message for a bad size"
    ;;
  same_limit)
    # A 1 TiB request (a PyTorch snapshot of an out-of-memory, converted):
    # with no --device-limit every target, the baselines too, runs under
    # the replay device's memory, so every one refuses it and none reports
    # holding it; the table says which limit that was.
    printf 'Thread,Time,Action,Pointer,Size,Stream\n0,00:00:00:000001,allocate,0x1000,1048576,0\n0,00:00:00:000002,allocate,0x2000,1099511627776,0\n0,00:00:00:000003,free,0x1000,1048576,0\n' > tib.csv
    "$replay" --policy all --json tib.csv > tib.jsonl 2> tib.err || fail "the replay failed"
    [ "$(wc -l < tib.jsonl)" -eq 9 ] || fail "not one line per target"
    [ "$(grep -c '"failed_allocations":1,' tib.jsonl)" -eq 9 ] || fail "a target did not refuse the 1 TiB request"
    [ "$(grep -c '"device_limit_bytes":1099511627776,"device_limit_given":false' tib.jsonl)" -eq 9 ] ||
      fail "the targets did not share the replay device's limit"
    if grep -q '"peak_reserved_bytes":[0-9]\{13,\}' tib.jsonl; then fail "a target reserved a TiB"; fi
    "$replay" --policy all tib.csv > tib.txt 2> tib.err || fail "the table failed"
    grep -q 'ran under one device limit: 1.00 TiB, the replay device' tib.txt || fail "the table does not state the limit"
    # Given, the limit binds every target alike, and differing failures are pointed out.
    "$replay" --policy best_fit --policy pytorch_rules --device-limit 300MiB "$sample" > small.txt 2> small.err ||
      fail "--device-limit 300MiB failed"
    grep -q 'one device limit: 300.00 MiB, as given' small.txt || fail "the given limit is not stated"
    grep -q 'failed different numbers of requests (best_fit [0-9]*, pytorch_rules [0-9]*)' small.txt ||
      fail "rows with different failures are not pointed out"
    # A device_limit in --conf binds the baselines too; a bad --conf, or a
    # limit past the replay device's memory, is refused before any work.
    "$replay" --policy cuda_malloc --conf device_limit:300MiB --json "$sample" > conf.jsonl 2> conf.err ||
      fail "--conf device_limit:300MiB failed"
    grep -q '"device_limit_bytes":314572800,"device_limit_given":true' conf.jsonl || fail "--conf's limit did not bind cuda_malloc"
    "$replay" --policy cuda_malloc --conf evict:maybe "$sample" > /dev/null 2> badconf.err
    [ $? -eq 2 ] || fail "a bad --conf was accepted with only baselines asked for"
    "$replay" --policy cuda_malloc --device-limit 2TiB "$sample" > /dev/null 2> big.err
    [ $? -eq 2 ] || fail "a limit past the replay device was accepted"
    grep -q 'above the replay device' big.err || fail "no reason for the refused limit"
    ;;
  outputs)
    # Every output is checked before the work: with a trace that would fail
    # mid-replay, a path that cannot be written is what is reported.
    printf 'Thread,Time,Action,Pointer,Size,Stream\n0,00:00:00:000001,frobnicate,0x10,64,0\n' > bad.csv
    for flag in --html --chrome-trace --json-out; do
      "$replay" "$flag" /no/such/dir/out bad.csv > /dev/null 2> out.err
      [ $? -eq 1 ] || fail "$flag: an unwritable path was not refused first"
      grep -q 'cannot write /no/such/dir/out.*No such file or directory' out.err || fail "$flag: no reason given"
    done
    # A replay that fails loses no earlier output and leaves no new one behind.
    echo "an earlier report" > kept.html
    "$replay" --html kept.html --chrome-trace new.json.gz bad.csv > /dev/null 2> fail.err
    [ $? -eq 2 ] || fail "the bad trace was not refused"
    [ "$(cat kept.html)" = "an earlier report" ] || fail "a failed replay cut an earlier report"
    [ ! -e new.json.gz ] || fail "a failed replay left an empty new output behind"
    # A .gz name is written gzipped, and holds the same trace.
    "$replay" --policy best_fit --chrome-trace t.json.gz "$sample" > /dev/null 2> gz.err || fail "--chrome-trace .gz"
    "$replay" --policy best_fit --chrome-trace t.json "$sample" > /dev/null 2> plain.err || fail "--chrome-trace"
    gzip -t t.json.gz || fail "t.json.gz is not gzip"
    # The same events (a run's timings differ between the two runs).
    events() { python3 -c 'import gzip, json, sys; o = gzip.open if sys.argv[1].endswith(".gz") else open; print(len(json.load(o(sys.argv[1], "rt"))["traceEvents"]))' "$1"; }
    [ "$(events t.json.gz)" -eq "$(events t.json)" ] || fail "the gzipped trace holds other events than the plain one"
    [ "$(wc -c < t.json.gz)" -lt "$(( $(wc -c < t.json) / 4 ))" ] || fail "the gzipped trace is not smaller"
    ;;
  lenient)
    # The first 1,000 events cut off: the trace frees blocks it never saw.
    zcat "$sample" | sed '2,1001d' > mid.csv
    "$replay" mid.csv > /dev/null 2> strict.err
    [ $? -eq 2 ] || fail "a mid-run trace was accepted without --lenient"
    grep -q 'free of unknown pointer.*--lenient' strict.err || fail "the error does not point to --lenient"
    "$replay" --lenient --json-out mid.jsonl mid.csv > mid.txt 2> lenient.err || fail "--lenient failed"
    grep -q 'frees of blocks allocated before mid.csv began were skipped' mid.txt || fail "no note under the table"
    grep -q '"unknown_frees":[1-9]' mid.jsonl || fail "no unknown_frees count"
    grep -q '"events":33692' mid.jsonl || fail "not every event was replayed"
    ;;
  pickle)
    # A snapshot by name and by its first byte (0x80, a pickle's protocol mark).
    printf '\200\002}q\000.' > snap.pickle
    cp snap.pickle snap.bin
    "$replay" snap.pickle > /dev/null 2> p1.err
    [ $? -eq 2 ] || fail "a .pickle was not refused with exit 2"
    "$replay" snap.bin > /dev/null 2> p2.err
    [ $? -eq 2 ] || fail "a pickle by content was not refused with exit 2"
    grep -q 'tidepool-snapshot2csv snap.pickle -o trace.csv' p1.err || fail "no converter command"
    grep -q 'PyTorch memory snapshot' p2.err || fail "a pickle by content was not recognised"
    ;;
  progress)
    "$replay" --progress --policy best_fit --policy rmm_pool "$sample" > /dev/null 2> progress.err || fail "exit $?"
    tr '\r' '\n' < progress.err > progress.txt
    grep -q '\[2/2\] seq2seq_b32.csv.gz rmm_pool .* 34692/34692 events .* ev/s ETA' progress.txt ||
      fail "the progress line lacks run, names, N/M, rate or ETA"
    ;;
  long_names)
    zcat "$sample" > a_trace_name_well_over_twenty_two_characters.csv
    "$replay" --policy pytorch_rules --policy best_fit a_trace_name_well_over_twenty_two_characters.csv > long.txt ||
      fail "exit $?"
    grep -q '^a_trace_name_well_over_twenty_two_characters.csv pytorch_rules ' long.txt || fail "a name was cut"
    ;;
  compare)
    # A replay set against an earlier one: matched by trace file name (the
    # copy here sits in another folder), policy and free mode; a change shows
    # with its sign; what one side lacks is named; a file that is not
    # tidepool-replay's JSON lines is refused before any replay.
    mkdir elsewhere && cp "$sample" elsewhere/ || fail "cannot copy the sample"
    "$replay" --policy best_fit --policy first_fit --device-limit 440MiB --json-out before.jsonl "$sample" \
      > /dev/null || fail "the earlier replay exited $?"
    "$replay" --policy best_fit --policy worst_fit --device-limit 440MiB --compare before.jsonl --html cmp.html \
      elsewhere/seq2seq_b32.csv.gz > cmp.txt || fail "exit $?"
    grep -q '^compared with before.jsonl' cmp.txt || fail "no comparison table"
    grep -q '^seq2seq_b32.csv.gz *best_fit *stream .* +0.0000 .* +0.00%' cmp.txt || fail "best_fit not matched unchanged"
    grep -q 'not compared: seq2seq_b32.csv.gz worst_fit (frees stream): only in this replay' cmp.txt ||
      fail "worst_fit not named as new"
    grep -q 'not compared: seq2seq_b32.csv.gz first_fit (frees stream): only in before.jsonl' cmp.txt ||
      fail "first_fit not named as gone"
    grep -q 'id="changes"' cmp.html || fail "no comparison section in the HTML"
    echo '{"trace": "x"}' > bad.jsonl
    "$replay" --compare bad.jsonl "$sample" > /dev/null 2> bad.err
    [ $? -eq 2 ] || fail "a bad --compare file was not refused with exit 2"
    grep -q 'bad.jsonl:1: .*keys' bad.err || fail "the refusal does not say where and why"
    ;;
  *)
    fail "unknown case"
    ;;
esac
