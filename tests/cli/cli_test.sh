#!/usr/bin/env bash
# Tests of the `soma` command-line tool, one behaviour per case:
#   cli_test.sh SOMA_BINARY MAKE_FIXTURES_BINARY FIXTURE_DIR CASE
# FIXTURE_DIR holds the files make_fixtures writes (the `fixtures` case runs it) and, after the
# `train` case, the model the eval/summary/predict cases read.
set -u
soma=$1
make_fixtures=$2
dir=$3
case_name=$4
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

fail() { echo "FAIL [$case_name]: $*"; echo "--- stdout"; cat "$out/stdout" 2>/dev/null; echo "--- stderr"; cat "$out/stderr" 2>/dev/null; exit 1; }
# run ARGS...: runs soma, keeps stdout/stderr and the exit status in $status.
run() { "$soma" "$@" >"$out/stdout" 2>"$out/stderr"; status=$?; }
expect_status() { [ "$status" -eq "$1" ] || fail "exit status $status, expected $1"; }
# expect_usage_error LINE: exit status 2 and exactly this one line on stderr.
expect_usage_error() {
  expect_status 2
  [ "$(wc -l <"$out/stderr")" -eq 1 ] || fail "expected a one-line error on stderr"
  [ "$(cat "$out/stderr")" = "$1" ] || fail "stderr is '$(cat "$out/stderr")', expected '$1'"
}
expect_stdout() { grep -Eq -- "$1" "$out/stdout" || fail "stdout does not match /$1/"; }
expect_result_line() {
  tail -n 1 "$out/stdout" | grep -Eq '^test_loss=[0-9.]+ test_accuracy=[0-9.]+$' ||
    fail "last line '$(tail -n 1 "$out/stdout")' is not test_loss=<x> test_accuracy=<y>"
}

case $case_name in
  fixtures)
    rm -rf "$dir" && mkdir -p "$dir" && "$make_fixtures" "$dir" ||
      fail "could not write the fixtures"
    ;;
  help_lists_subcommands)
    run --help
    expect_status 0
    for c in train eval predict summary bench info; do expect_stdout "^  $c "; done
    ;;
  every_subcommand_has_help)
    for c in train eval predict summary bench; do
      run "$c" --help
      expect_status 0
      expect_stdout "^usage: soma $c"
      run "$c" -h
      expect_status 0
    done
    ;;
  help_command_shows_the_command_help)
    for c in train eval predict summary bench export info; do
      run help "$c"
      expect_status 0
      expect_stdout "^usage: soma $c"
    done
    run help frobnicate
    expect_usage_error "soma help: unknown command 'frobnicate' (see soma --help)"
    ;;
  short_options)
    run train -e 0
    expect_usage_error "soma train: bad value for --epochs: '0' (expected an integer in 1..1000000) (see soma train --help)"
    run train -b0
    expect_usage_error "soma train: bad value for --batch-size: '0' (expected an integer >= 1) (see soma train --help)"
    run train -x 1
    expect_usage_error "soma train: unknown option -x (see soma train --help)"
    run train --help
    expect_stdout '^  -e, --epochs N'
    ;;
  bash_completion)
    command -v bash >/dev/null || exit 0
    comp="$(dirname "$0")/../../apps/soma/soma.bash-completion"
    words=$(bash -c "source '$comp'; COMP_WORDS=('$soma' tr); COMP_CWORD=1; _soma; echo \"\${COMPREPLY[*]}\"")
    [ "$words" = "train" ] || fail "completing 'tr' gave '$words', expected 'train'"
    words=$(bash -c "source '$comp'; COMP_WORDS=('$soma' train --epo); COMP_CWORD=2; _soma; echo \"\${COMPREPLY[*]}\"")
    [ "$words" = "--epochs" ] || fail "completing 'train --epo' gave '$words', expected '--epochs'"
    ;;
  version)
    run --version
    expect_status 0
    expect_stdout '^soma [0-9]+\.[0-9]+\.[0-9]+$'
    ;;
  no_arguments_is_a_usage_error)
    run
    expect_status 2
    ;;
  unknown_subcommand)
    run frobnicate
    expect_usage_error "soma: unknown command 'frobnicate' (see soma --help)"
    ;;
  unknown_option)
    run train --foo
    expect_usage_error "soma train: unknown option --foo (see soma train --help)"
    run eval model.soma --foo=1
    expect_usage_error "soma eval: unknown option --foo (see soma eval --help)"
    ;;
  bad_integer_value)
    run train --epochs abc
    expect_usage_error "soma train: bad value for --epochs: 'abc' (expected an integer in 1..1000000) (see soma train --help)"
    run train --batch-size=0
    expect_usage_error "soma train: bad value for --batch-size: '0' (expected an integer >= 1) (see soma train --help)"
    ;;
  bad_choice_value)
    run train --model resnet
    expect_usage_error "soma train: bad value for --model: 'resnet' (expected one of mlp, cnn, lenet) (see soma train --help)"
    run train --optimizer lbfgs
    expect_status 2
    ;;
  missing_value)
    run train --epochs
    expect_usage_error "soma train: option --epochs needs a value (see soma train --help)"
    ;;
  positional_argument_count)
    run summary
    expect_usage_error "soma summary: missing argument MODEL (see soma summary --help)"
    run summary a.soma b.soma
    expect_usage_error "soma summary: unexpected argument 'b.soma' (see soma summary --help)"
    ;;
  data_needs_directory)
    run train --data mnist
    expect_usage_error "soma train: bad value for --data: 'mnist' (mnist needs a directory: --data mnist:DIR) (see soma train --help)"
    ;;
  missing_data_directory_is_a_clear_error)
    run train --data idx:"$out/nowhere" --epochs 1
    expect_status 1
    grep -q "not a directory" "$out/stderr" || fail "the error does not say what is wrong"
    ;;
  train)
    run train --model mlp --epochs 1 --batch-size 32 --seed 1 --data idx:"$dir" \
      --out "$dir/mlp.soma" --threads 1
    expect_status 0
    expect_result_line
    expect_stdout 'val_accuracy'
    [ -s "$dir/mlp.soma" ] || fail "no model file"
    [ -s "$dir/mlp.soma.csv" ] || fail "no CSV file"
    head -n 1 "$dir/mlp.soma.csv" | grep -q '^epoch,' || fail "CSV header: $(head -n 1 "$dir/mlp.soma.csv")"
    [ "$(wc -l <"$dir/mlp.soma.csv")" -eq 2 ] || fail "CSV should hold a header and one epoch"
    # The tiny set is easy: one epoch must learn it, so the accuracy is real.
    acc=$(tail -n 1 "$out/stdout" | sed 's/.*test_accuracy=//')
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.5) }' || fail "test accuracy $acc < 0.5"
    ;;
  train_csv_reads_like_keras_csvlogger)
    # Issue 27: the --csv log opens unchanged in pandas and Python's csv module, as a Keras
    # CSVLogger file does: header "epoch" then the metric names sorted, one row per epoch from 0,
    # every field a number. pandas is a test oracle (Debian's python3-pandas); without it only the
    # csv module reads the file.
    run train --model mlp --epochs 3 --batch-size 32 --seed 1 --data idx:"$dir" \
      --out "$out/k.soma" --csv "$out/k.csv" --threads 1 --verbose 0
    expect_status 0
    /usr/bin/python3 -s - "$out/k.csv" >"$out/py" 2>&1 <<'PY' || fail "the CSV log is not what Keras' CSVLogger writes: $(cat "$out/py")"
import csv, math, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
head, body = rows[0], rows[1:]
assert head[0] == "epoch", head
assert head[1:] == sorted(head[1:]), f"metric columns not sorted as Keras sorts them: {head}"
assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(head), head
assert [r[0] for r in body] == ["0", "1", "2"], [r[0] for r in body]
for r in body:
    assert len(r) == len(head), r
    assert all(math.isfinite(float(v)) for v in r[1:]), r
try:
    import pandas
except ImportError:
    print("pandas not installed: read with the csv module only")
    sys.exit(0)
df = pandas.read_csv(sys.argv[1])
assert list(df.columns) == head, list(df.columns)
assert len(df) == 3 and list(df["epoch"]) == [0, 1, 2], df
assert all(str(t) in ("int64", "float64") for t in df.dtypes), df.dtypes
assert not df.isna().any().any(), df
# soma writes the shortest round-trip form: pandas' round-trip parser gets the exact double back
exact = pandas.read_csv(sys.argv[1], float_precision="round_trip")
assert exact["loss"].iloc[-1] == float(body[-1][head.index("loss")]), exact["loss"]
print("pandas", pandas.__version__, "reads", len(df), "epochs:", list(df.columns))
PY
    ;;
  train_from_config)
    run train --config "$dir/my_model.json" --data idx:"$dir" --epochs 3 --out "$out/c.soma" \
      --csv "$out/c.csv" --verbose 0 --optimizer sgd --lr 0.1
    expect_status 0
    [ "$(wc -l <"$out/stdout")" -eq 1 ] || fail "--verbose 0 should print the result line only"
    expect_result_line
    [ "$(wc -l <"$out/c.csv")" -eq 4 ] || fail "CSV should hold a header and three epochs"
    # Layers are read through their own config fields: layers the CLI has no code for train too.
    printf '%s' '{"layers": [{"type": "Flatten"}, {"type": "Dense", "units": 16},' \
      ' {"type": "LayerNormalization"}, {"type": "GELU"}, {"type": "Dense", "units": 10}]}' >"$out/new.json"
    run train --config "$out/new.json" --data idx:"$dir" --epochs 1 --out "$out/new.soma" --verbose 0
    expect_status 0
    expect_result_line
    ;;
  train_from_keras_config)
    run train --config "$dir/keras_model.json" --data idx:"$dir" --epochs 1 --out "$out/k.soma"
    expect_status 0
    expect_result_line
    expect_stdout 'conv2d \(Conv2D\) +│ \(None, 4, 26, 26\)'
    ;;
  train_from_config_with_normalization)
    # A Normalization after Flatten (one mean/variance per pixel) is adapted by `soma train` on
    # what Flatten makes of the training images; the model file carries the statistics, so
    # `soma eval` on the raw data reproduces train's test result exactly.
    printf '%s' '{"layers": [{"type": "Flatten"}, {"type": "Normalization"},' \
      ' {"type": "Dense", "units": 10}]}' >"$out/norm.json"
    run train --config "$out/norm.json" --data idx:"$dir" --epochs 1 --out "$out/n.soma" --seed 3
    expect_status 0
    expect_stdout 'normalization \(Normalization\) +│ \(None, 784\) +│ +1,569'
    trained=$(tail -n 1 "$out/stdout")
    run eval "$out/n.soma" --data idx:"$dir"
    expect_status 0
    [ "$(tail -n 1 "$out/stdout")" = "$trained" ] ||
      fail "eval gives '$(tail -n 1 "$out/stdout")', train gave '$trained'"
    ;;
  bad_config_names_the_layer)
    run train --config "$dir/bad_model.json" --data idx:"$dir" --epochs 1 --out "$out/b.soma"
    expect_status 1
    # A typo ("unitz") is an unknown key: the error names the layer, the key and the allowed keys.
    grep -q "^soma train: $dir/bad_model.json: layers\[1\] (Dense): unknown key \"unitz\" (allowed keys: activation, bias_initializer, " "$out/stderr" ||
      fail "unexpected error: $(cat "$out/stderr")"
    printf '%s' '{"layers": [{"type": "Flatten"}, {"type": "Dense"}]}' >"$out/missing.json"
    run train --config "$out/missing.json" --data idx:"$dir" --epochs 1 --out "$out/b.soma"
    expect_status 1
    [ "$(cat "$out/stderr")" = "soma train: $out/missing.json: layers[1] (Dense): missing \"units\"" ] ||
      fail "unexpected error: $(cat "$out/stderr")"
    printf '%s' '{"layers": [{"type": "Flatten"}, {"type": "Dropout", "rate": "half"}]}' >"$out/type.json"
    run train --config "$out/type.json" --data idx:"$dir" --epochs 1 --out "$out/b.soma"
    expect_status 1
    grep -q "^soma train: $out/type.json: layers\[1\] (Dropout): bad value for \"rate\": .*\"half\".*(allowed keys: rate, seed, name, trainable)" "$out/stderr" ||
      fail "unexpected error: $(cat "$out/stderr")"
    ;;
  train_softmax_config_uses_probabilities)
    # A config ending with a softmax outputs probabilities: the loss must not take them for
    # logits (a second softmax), and predict must show them as they are (issue 19).
    run train --config "$dir/softmax_model.json" --data idx:"$dir" --epochs 3 --seed 1 \
      --out "$out/s.soma" --verbose 0
    expect_status 0
    expect_result_line
    grep -aq '"class_name":"SparseCategoricalCrossentropy","config":{"from_logits":false' "$out/s.soma" ||
      fail "the saved loss is not sparse_categorical_crossentropy with from_logits=false"
    acc=$(tail -n 1 "$out/stdout" | sed 's/.*test_accuracy=//')
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.8) }' || fail "test accuracy $acc < 0.8"
    run predict "$out/s.soma" "$dir/shoe.png" --classes mnist
    expect_status 0
    # A softmax of probabilities over 10 classes is at most e/(e+9) = 23.2%.
    top=$(sed -n 2p "$out/stdout" | awk '{ sub("%", "", $2); print $2 }')
    awk -v t="$top" 'BEGIN { exit !(t > 30) }' || fail "top probability $top% (a softmax applied twice?)"
    ;;
  summary_warns_about_invalid_weights)
    run summary "$dir/nan_model.soma"
    expect_status 0
    expect_stdout 'Total params'
    grep -Eq "^soma summary: warning: '.*nan_model.soma': layer 'dense[_0-9]*', variable 'kernel': 3 NaN, 1 inf of 7840 values$" \
      "$out/stderr" || fail "no warning naming the layer, the variable and the counts"
    run summary "$dir/bad_variance.soma"
    expect_status 0
    grep -Eq "layer 'batch_normalization[_0-9]*', variable 'moving_variance': 5 negative" "$out/stderr" ||
      fail "no warning about the negative moving variance"
    ;;
  eval_refuses_invalid_weights)
    run eval "$dir/nan_model.soma" --data idx:"$dir"
    expect_status 1
    grep -q "variable 'kernel': 3 NaN, 1 inf of 7840 values" "$out/stderr" || fail "no warning"
    grep -q "has invalid weights .*--allow-invalid-weights" "$out/stderr" || fail "no refusal"
    [ ! -s "$out/stdout" ] || fail "eval printed results for a refused model"
    run eval "$dir/bad_variance.soma" --data idx:"$dir"
    expect_status 1
    run eval "$dir/nan_model.soma" --data idx:"$dir" --allow-invalid-weights
    expect_status 0
    grep -q "3 NaN" "$out/stderr" || fail "--allow-invalid-weights should still warn"
    ;;
  train_stops_on_nan_data)
    # Training images holding a NaN make the loss (or, where an op drops the NaN, the weights:
    # the Normalization adapted on the data) NaN: soma train stops with exit status 1 and a
    # message saying where and that no model was saved; it never saves a NaN model.
    run train --model mlp --epochs 2 --data idx:"$dir/nan_data" --out "$out/nan.soma" \
      --threads 1 --verbose 0
    expect_status 1
    grep -Eq '^soma train: the (training loss became nan in epoch 1 \(batch [0-9]+\)|weights became NaN or infinite in epoch 1); training stopped\. No epoch ended with a finite loss and finite weights, so no model was saved \(.*nan\.soma was not written\)' \
      "$out/stderr" || fail "the error does not say that the loss became NaN and nothing was saved"
    [ ! -e "$out/nan.soma" ] || fail "a model was saved"
    grep -q 'test_loss=' "$out/stdout" && fail "a result line was printed"
    ;;
  train_stops_when_the_loss_diverges)
    # So high a learning rate makes the loss overflow. Whatever epoch that happens in, soma train
    # fails, and the model file is the last epoch that ended with a finite loss (eval gives
    # finite numbers) or is not written at all, as the message says.
    echo keep >"$out/div.soma"
    run train --model mlp --optimizer sgd --lr 1000000 --epochs 3 --data idx:"$dir" \
      --out "$out/div.soma" --threads 1 --verbose 0
    expect_status 1
    grep -Eq '^soma train: the training loss became (nan|inf|-inf) in epoch [1-3] \(batch [0-9]+\); training stopped\.' \
      "$out/stderr" || fail "the error does not say that the loss diverged"
    if grep -q 'Saved the model of epoch' "$out/stderr"; then
      run eval "$out/div.soma" --data idx:"$dir"
      expect_status 0
      expect_result_line
    else
      grep -q 'no model was saved' "$out/stderr" || fail "the error does not say what was saved"
      [ "$(cat "$out/div.soma")" = keep ] || fail "the model file was overwritten"
    fi
    # A rate that diverges later (epoch 2 here; it depends on the machine's arithmetic): if it
    # fails, the model file saved is a good earlier epoch's.
    run train --model mlp --optimizer sgd --lr 0.5 --epochs 6 --data idx:"$dir" \
      --out "$out/late.soma" --threads 1 --verbose 0
    if [ "$status" -ne 0 ]; then
      expect_status 1
      if grep -Eq 'Saved the model of epoch [0-9]+, the last with a finite loss' "$out/stderr"; then
        run eval "$out/late.soma" --data idx:"$dir"
        expect_status 0
        expect_result_line
      else
        [ ! -e "$out/late.soma" ] || fail "a model was saved though the message says none was"
      fi
    fi
    ;;
  model_and_config_exclude_each_other)
    run train --model mlp --config "$dir/my_model.json"
    expect_usage_error "soma train: --model and --config exclude each other (see soma train --help)"
    ;;
  train_cnn)
    run train --model cnn --epochs 1 --batch-size 64 --data idx:"$dir" --out "$out/cnn.soma" \
      --verbose 2
    expect_status 0
    expect_result_line
    [ -s "$out/cnn.soma" ] || fail "no model file"
    ;;
  eval)
    run eval "$dir/mlp.soma" --data idx:"$dir"
    expect_status 0
    expect_result_line
    expect_stdout '^per-class accuracy'
    expect_stdout '^confusion matrix'
    # The confusion matrix counts every test sample once.
    total=$(sed -n '/^confusion matrix/,/^$/p' "$out/stdout" | tail -n +3 | head -n 10 |
            awk '{ for (i = NF - 9; i <= NF; ++i) s += $i } END { print s }')
    [ "$total" = 100 ] || fail "confusion matrix sums to $total, expected 100"
    ;;
  eval_missing_model_file)
    run eval "$out/none.soma" --data idx:"$dir"
    expect_status 1
    ;;
  summary)
    run summary "$dir/mlp.soma"
    expect_status 0
    expect_stdout 'Dense'
    # The built-in mlp starts with a Normalization adapted by `soma train`: mean, variance and
    # count are 3 non-trainable parameters.
    expect_stdout 'normalization \(Normalization\) .* 3 '
    expect_stdout 'Total params: 118,285'
    expect_stdout 'Non-trainable params: 3 '
    ;;
  predict)
    run predict "$dir/mlp.soma" "$dir/shoe.png" "$dir/shoe.png" --classes mnist
    expect_status 0
    [ "$(grep -c 'shoe.png:$' "$out/stdout")" -eq 2 ] || fail "expected one block per image"
    [ "$(grep -c '%' "$out/stdout")" -eq 6 ] || fail "expected the top 3 classes per image"
    # The fixture shoe is drawn as class 7.
    sed -n 2p "$out/stdout" | grep -q '(class 7)' || fail "top class is not 7"
    ;;
  predict_onnx_batched)
    # An ONNX file as MODEL (soma::onnx::load), three images in batches of 2 (two forward
    # passes): the same top classes as the model file, one block per image, in order.
    run export "$dir/mlp.soma" "$out/mlp.onnx"
    if grep -q 'no ONNX support' "$out/stderr"; then exit 77; fi
    expect_status 0
    run predict "$dir/mlp.soma" "$dir/shoe.png" "$dir/shoe.png" "$dir/shoe.png" --classes mnist --top 1
    expect_status 0
    grep -o '(class [0-9]*)' "$out/stdout" >"$out/soma_classes"
    run predict "$out/mlp.onnx" "$dir/shoe.png" "$dir/shoe.png" "$dir/shoe.png" --classes mnist \
      --top 1 --batch-size 2
    expect_status 0
    [ "$(grep -c 'shoe.png:$' "$out/stdout")" -eq 3 ] || fail "expected one block per image"
    grep -o '(class [0-9]*)' "$out/stdout" | diff - "$out/soma_classes" >/dev/null ||
      fail "the ONNX file's top classes differ from the model file's"
    sed -n 2p "$out/stdout" | grep -q '(class 7)' || fail "top class is not 7"
    run predict "$out/mlp.onnx" "$dir/shoe.png" --batch-size 0
    expect_status 2
    ;;
  predict_needs_an_image)
    run predict "$dir/mlp.soma"
    expect_usage_error "soma predict: missing argument MODEL IMAGE... (see soma predict --help)"
    ;;
  bench_op_overhead)
    run bench --workload op_overhead
    expect_status 0
    [ "$(wc -l <"$out/stdout")" -eq 1 ] || fail "expected one line"
    expect_stdout '^bench workload=op_overhead threads=[0-9]+ batch=1 value=[0-9.e+-]+ unit=ns$'
    ;;
  bench_lists_and_options)
    run bench --workload mlp_train --threads 1,2 --batch 16 --steps 5
    expect_status 0
    [ "$(wc -l <"$out/stdout")" -eq 2 ] || fail "expected one line per thread count"
    expect_stdout '^bench workload=mlp_train threads=1 batch=16 value=[0-9.e+-]+ unit=samples/s$'
    expect_stdout '^bench workload=mlp_train threads=2 batch=16 value=[0-9.e+-]+ unit=samples/s$'
    run bench --workload nope
    expect_status 2
    ;;
  export)
    # soma export MODEL OUT.onnx; the file passes onnx.checker when Debian's python3-onnx is
    # there. A build without ONNX must say so (exit status 2).
    run export "$dir/mlp.soma" "$out/mlp.onnx" --opset 17
    if grep -q 'no ONNX support' "$out/stderr"; then expect_status 2; exit 0; fi
    expect_status 0
    expect_stdout '^wrote .*mlp.onnx \(ONNX opset 17, 118285 parameters\)$'
    [ -s "$out/mlp.onnx" ] || fail "no ONNX file written"
    if /usr/bin/python3 -s -c 'import onnx' 2>/dev/null; then
      /usr/bin/python3 -s "$(dirname "$0")/../onnx/check_model.py" "$out/mlp.onnx" >"$out/stdout" 2>&1 ||
        fail "onnx.checker rejects the file"
    fi
    run export "$dir/mlp.soma"
    expect_usage_error "soma export: missing argument MODEL OUT.onnx (see soma export --help)"
    run export "$dir/mlp.soma" "$out/x.onnx" --opset 10
    expect_status 2
    ;;
  output_paths_are_checked_before_training)
    # A missing (or read-only, or full) directory for --out or --csv fails before the data is
    # loaded, naming the option and the path, instead of after the whole training run.
    run train --model mlp --epochs 1 --data idx:"$dir" --out /nonexistent/dir/model.soma --csv "$out/log.csv"
    expect_status 1
    grep -qF -- "--out '/nonexistent/dir/model.soma'" "$out/stderr" || fail "the error does not name --out and the path"
    grep -q 'No such file or directory' "$out/stderr" || fail "the error does not say why"
    grep -q 'Epoch' "$out/stdout" && fail "it trained before checking --out"
    run train --model mlp --epochs 1 --data idx:"$dir" --out "$out/m.soma" --csv /nonexistent/dir/log.csv
    expect_status 1
    grep -qF -- "--csv '/nonexistent/dir/log.csv'" "$out/stderr" || fail "the error does not name --csv and the path"
    grep -q 'Epoch' "$out/stdout" && fail "it trained before checking --csv"
    ;;
  export_onto_a_full_disk_keeps_the_old_file)
    # A 64 KiB tmpfs (root only; exit status 77 = skipped) holding a 20 KB file: the export does
    # not fit, and the old file must stay whole, byte for byte.
    disk="$out/disk"
    mkdir -p "$disk"
    mount -t tmpfs -o size=64k tmpfs "$disk" 2>/dev/null || { echo "cannot mount a tmpfs here: skipped"; exit 77; }
    trap 'umount "$disk"; rm -rf "$out"' EXIT
    head -c 20000 /dev/urandom >"$out/good.onnx"
    cp "$out/good.onnx" "$disk/m.onnx"
    run export "$dir/mlp.soma" "$disk/m.onnx"
    if grep -q 'no ONNX support' "$out/stderr"; then exit 77; fi
    expect_status 1
    grep -qF "'$disk/m.onnx'" "$out/stderr" || fail "the error does not name the file"
    grep -q 'No space left on device' "$out/stderr" || fail "the error does not say why"
    cmp -s "$disk/m.onnx" "$out/good.onnx" || fail "the old file was overwritten"
    [ "$(ls -A "$disk")" = m.onnx ] || fail "files left behind: $(ls -A "$disk")"
    ;;
  memory_limit_is_a_clear_error)
    # --memory-limit (a global option, before the command): a tensor over it is an error naming
    # the tensor, exit status 1, not a kill.
    run --memory-limit 1M bench --workload mlp_train --threads 1 --steps 2
    expect_status 1
    grep -Eq '^soma bench: allocate: cannot allocate [0-9.]+ MiB for tensor \[[0-9, ]+\] f32 on cpu: .* available \(the memory limit of 1.0 MiB' "$out/stderr" ||
      fail "stderr does not name the tensor and the limit"
    run --memory-limit=2G bench --workload mlp_train --threads 1 --steps 2
    expect_status 0
    run --memory-limit lots bench
    expect_status 2
    run --memory-limit
    expect_status 2
    SOMA_MEMORY_LIMIT=1M "$soma" bench --workload mlp_train --threads 1 --steps 2 >"$out/stdout" 2>"$out/stderr"
    status=$?
    expect_status 1
    grep -q 'set with SOMA_MEMORY_LIMIT' "$out/stderr" || fail "stderr does not name SOMA_MEMORY_LIMIT"
    ;;
  openmp_threads_sleep_while_waiting_by_default)
    # The soma command's OpenMP default (src/startup/omp_defaults.cpp): OMP_WAIT_POLICY=passive
    # (libgomp shows it as spin count 0) when other work competes for the cores at start, libgomp's
    # spinning default on an idle machine; the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT always win.
    # (Only the busy case is checked: under ctest -j2 the machine is never reliably idle.)
    yes >/dev/null & y1=$!
    yes >/dev/null & y2=$!
    sleep 0.2
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose "$soma" --version >"$out/stdout" 2>"$out/stderr"
    kill $y1 $y2
    grep -q "GOMP_SPINCOUNT = '0'" "$out/stderr" || fail "the passive default is not in force on a busy machine"
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT SOMA_OMP_DEFAULTS=passive OMP_DISPLAY_ENV=verbose "$soma" --version >"$out/stdout" 2>"$out/stderr"
    grep -q "GOMP_SPINCOUNT = '0'" "$out/stderr" || fail "SOMA_OMP_DEFAULTS=passive does not force passive"
    env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=7 OMP_DISPLAY_ENV=verbose "$soma" --version >"$out/stdout" 2>"$out/stderr"
    grep -q "GOMP_SPINCOUNT = '7'" "$out/stderr" || fail "the user's GOMP_SPINCOUNT was overridden"
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT SOMA_OMP_DEFAULTS=0 OMP_DISPLAY_ENV=verbose "$soma" --version >"$out/stdout" 2>"$out/stderr"
    grep -q "GOMP_SPINCOUNT = '300000'" "$out/stderr" || fail "SOMA_OMP_DEFAULTS=0 does not leave libgomp's default"
    expect_stdout '^soma '
    ;;
  info_lists_devices)
    run info
    expect_status 0
    expect_stdout '^soma [0-9]+\.[0-9]+\.[0-9]+$'
    expect_stdout '^cpu: [0-9]+ threads$'
    # Either not built (with the reason), or the versions, cuDNN and the device list.
    if grep -q '^cuda: not built (.\+)$' "$out/stdout"; then
      grep -q '^cuda devices' "$out/stdout" && fail "a build without CUDA lists devices"
    else
      expect_stdout '^cuda: built; runtime [0-9]+\.[0-9]+, driver ([0-9]+\.[0-9]+|not found)$'
      expect_stdout '^cudnn: ([0-9]+\.[0-9]+\.[0-9]+|not loaded \(.+\))$'
      expect_stdout '^tf32: (on|off) .+'
      expect_stdout '^cuda devices: (none \(.+\)|[0-9]+)$'
      n=$(sed -n 's/^cuda devices: \([0-9]*\)$/\1/p' "$out/stdout")
      if [ -n "$n" ]; then
        [ "$(grep -Ec '^  cuda:[0-9]+  .+  memory .+ compute capability [0-9]+\.[0-9]+' "$out/stdout")" -eq "$n" ] ||
          fail "expected one line per device (name, memory, compute capability)"
      fi
    fi
    run info --help
    expect_status 0
    expect_stdout '^usage: soma info'
    ;;
  device_option_is_checked)
    for c in train "eval $dir/mlp.soma" "predict $dir/mlp.soma $dir/shoe.png"; do
      sub=${c%% *}
      # shellcheck disable=SC2086
      run $c --device tpu
      expect_usage_error "soma $sub: bad value for --device: 'tpu' (expected cpu, cuda or cuda:N) (see soma $sub --help)"
      # shellcheck disable=SC2086
      run $c --device cuda:x
      expect_status 2
    done
    # --precision: f32, tf32, bf16 or f16, checked before any data is read.
    run train --precision int8 --data idx:"$out/nowhere"
    expect_usage_error "soma train: bad value for --precision: 'int8' (expected f32, tf32, bf16 or f16) (see soma train --help)"
    # --device cpu is the default, said out loud.
    run eval "$dir/mlp.soma" --data idx:"$dir" --device cpu
    expect_status 0
    expect_result_line
    # A GPU that cannot be used fails before the data is read (the data directory does not
    # exist), naming the reason: exit 2 in a build without CUDA, 1 when CUDA has no device.
    "$soma" info >"$out/info" 2>&1
    if grep -q '^cuda: not built' "$out/info"; then want=2; reason='built without CUDA'
    elif grep -q '^cuda devices: none' "$out/info"; then want=1; reason='CUDA is not available: '
    else want=1; reason=''
    fi
    if [ -n "$reason" ]; then
      run train --device cuda --data idx:"$out/nowhere" --epochs 1 --out "$out/m.soma"
      expect_status $want
      [ "$(wc -l <"$out/stderr")" -eq 1 ] || fail "expected a one-line error on stderr"
      grep -q -- "^soma train: --device cuda: .*$reason" "$out/stderr" || fail "the error does not name the reason"
      grep -q "nowhere" "$out/stderr" && fail "the data was read before the device was checked"
    fi
    # An index past the last device names how many there are.
    run eval "$dir/mlp.soma" --data idx:"$out/nowhere" --device cuda:999
    [ "$status" -ne 0 ] || fail "cuda:999 was accepted"
    grep -q "nowhere" "$out/stderr" && fail "the data was read before the device was checked"
    [ -z "$reason" ] && { grep -q 'there is no cuda:999 (' "$out/stderr" || fail "cuda:999: $(cat "$out/stderr")"; }
    ;;
  train_on_cuda)
    # On a GPU: train, evaluate and predict with --device cuda (skipped, exit 77, without one).
    "$soma" info >"$out/info" 2>&1
    grep -Eq '^cuda devices: [1-9]' "$out/info" || { echo "skipped: no usable GPU"; exit 77; }
    run train --model mlp --epochs 1 --batch-size 32 --seed 1 --data idx:"$dir" \
      --out "$out/gpu.soma" --device cuda
    expect_status 0
    expect_result_line
    acc=$(tail -n 1 "$out/stdout" | sed 's/.*test_accuracy=//')
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.5) }' || fail "test accuracy $acc < 0.5 on the GPU"
    run eval "$out/gpu.soma" --data idx:"$dir" --device cuda
    expect_status 0
    expect_result_line
    run predict "$out/gpu.soma" "$dir/shoe.png" --classes mnist --device cuda:0
    expect_status 0
    [ "$(grep -c '%' "$out/stdout")" -eq 3 ] || fail "expected the top 3 classes"
    # The same model as an ONNX file, imported and run on the GPU in batches of 2: the CPU's
    # top classes (issue 24).
    run export "$out/gpu.soma" "$out/gpu.onnx"
    if ! grep -q 'no ONNX support' "$out/stderr"; then
      expect_status 0
      run predict "$out/gpu.onnx" "$dir/shoe.png" "$dir/shoe.png" "$dir/shoe.png" --classes mnist \
        --top 1 --batch-size 2
      expect_status 0
      grep -o '(class [0-9]*)' "$out/stdout" >"$out/cpu_classes"
      run predict "$out/gpu.onnx" "$dir/shoe.png" "$dir/shoe.png" "$dir/shoe.png" --classes mnist \
        --top 1 --batch-size 2 --device cuda
      expect_status 0
      [ "$(grep -c 'shoe.png:$' "$out/stdout")" -eq 3 ] || fail "expected one block per image"
      grep -o '(class [0-9]*)' "$out/stdout" | diff - "$out/cpu_classes" >/dev/null ||
        fail "the ONNX model's classes on the GPU differ from the CPU's"
    fi
    ;;
  *)
    fail "unknown test case"
    ;;
esac
exit 0
