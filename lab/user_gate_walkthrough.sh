#!/usr/bin/env bash
# A new user's gate at FULL power, timed: the README's and docs' commands, as written, in a scratch
# project. tests/test_docs_user_gate.py runs the same commands with the documented small designs
# (in `make test`); this is the full-power walk-through it stands for, too slow for the suite.
#
#   python3 -m venv /tmp/nu && /tmp/nu/bin/pip install <checkout> pytest
#   PATH=/tmp/nu/bin:$PATH bash lab/user_gate_walkthrough.sh /tmp/nuproj <checkout>
#
# Prints one row a step: minutes from the start, seconds, exit status (and the one wanted), the
# verdict line. Every verdict states its power; the wanted exit statuses are the documented ones.
set -u
PROJECT=${1:?scratch project folder}
CHECKOUT=${2:?verispec checkout (for the examples: tests/textbook_verifier.py)}
mkdir -p "$PROJECT/mypkg" && cd "$PROJECT" || exit 2
export CI=true OPENBLAS_NUM_THREADS=1
T0=$(date +%s.%N)
echo "| step | min from start | seconds | exit (wanted) | verdict |"
echo "|---|---|---|---|---|"

step() {  # step NAME WANTED COMMAND...: run it, one table row
    local name=$1 wanted=$2
    shift 2
    local began ended
    began=$(date +%s.%N)
    bash -c "$*" >"$PROJECT/.last.out" 2>"$PROJECT/.last.err"
    local status=$?
    ended=$(date +%s.%N)
    local verdict
    verdict=$(grep -E "^(lossless|not |PASSED|FAILED|INCONCLUSIVE|underpowered|[0-9]+ (passed|failed))|^(PASS|FAIL)  '" "$PROJECT/.last.out" | tail -1 | cut -c1-160)
    printf "| %s | %.1f | %.0f | %s (%s) | %s |\n" "$name" "$(echo "($began - $T0) / 60" | bc -l)" \
        "$(echo "$ended - $began" | bc -l)" "$status" "$wanted" "${verdict:-$(tail -1 "$PROJECT/.last.out" | cut -c1-160)}"
}

touch mypkg/__init__.py
step "templates: sampler, decoder" 0 "verispec template law-only-verifier > mypkg/sampler.py && verispec template model-api-decoder > mypkg/decoder.py"
sed 's/    residual = np.maximum(p\[..., :-1, :\] - q, 0.0)  # \[..., k, V\]/    residual = p[..., :-1, :].copy()  # BUG/' mypkg/sampler.py > mypkg/broken_sampler.py
sed 's/            rows\[len(drafts)\], history + kept/            rows[len(drafts) - 1], history + kept/' mypkg/decoder.py > mypkg/broken_decoder.py
cp "$CHECKOUT/tests/textbook_verifier.py" mypkg/textbook.py

# the verifier: README
step "law-only sampler, full power (README)" 0 "PYTHONPATH=. verispec check --law-only --verifier mypkg.sampler:verify --batch-verifier mypkg.sampler:verify_batch --budget 600"
step "law-only sampler, --workers 2" 0 "PYTHONPATH=. verispec check --law-only --verifier mypkg.sampler:verify --batch-verifier mypkg.sampler:verify_batch --budget 600 --workers 2"
step "broken sampler, full power" 1 "PYTHONPATH=. verispec check --law-only --verifier mypkg.broken_sampler:verify --batch-verifier mypkg.broken_sampler:verify_batch --budget 600"
step "textbook verifier, protocol (README)" 1 "PYTHONPATH=. verispec check --verifier mypkg.textbook:verify --batch-verifier mypkg.textbook:verify_batch"
step "the reference, protocol, full power (checking-verifiers)" 0 "verispec check --verifier verispec.reference.speculative:verify_sampled --batch-verifier verispec.reference.speculative:verify_sampled_batch --greedy-verifier verispec.reference.speculative:verify_greedy --pipeline verispec.spec.pipeline:ReferencePipeline"
step "a mutant over the wire (checking-verifiers)" 1 "verispec check --verifier-cmd 'python -m verispec.spec.external --mutant bonus_from_wrong_row'"
step "quick look without --min-power (ci.md)" 3 "PYTHONPATH=. verispec check --law-only --verifier mypkg.sampler:verify --batch-verifier mypkg.sampler:verify_batch --scale 0.05"

# pytest: the README's and ci.md's snippets
cat > test_gate.py <<'EOF'
def test_my_sampler(verispec_check):
    report = verispec_check(verifier="mypkg.sampler:verify", batch_verifier="mypkg.sampler:verify_batch", law_only=True)
    assert report.passed, report.summary()


def test_my_broken_sampler_fails(verispec_check):
    report = verispec_check(verifier="mypkg.broken_sampler:verify", batch_verifier="mypkg.broken_sampler:verify_batch", law_only=True)
    assert not report.passed, report.summary()
EOF
step "pytest, full power (README)" 0 "python -m pytest -q --junit-xml gate.xml test_gate.py"

# the workflow: ci.md
ARGS="--verifier mypkg.sampler:verify --batch-verifier mypkg.sampler:verify_batch --law-only"
step "workflow template (ci.md)" 0 "verispec template github-actions --shards 2 --install $CHECKOUT --check-args='$ARGS' > verispec.yml"
step "workflow shards 1+2 at once, full power" 0 "(PYTHONPATH=. verispec check $ARGS --shard 1/2 --json --junit-xml shard-1.xml > shard-1.json & PYTHONPATH=. verispec check $ARGS --shard 2/2 --json --junit-xml shard-2.xml > shard-2.json; wait)"
step "workflow merge" 0 "verispec check --merge shard-*.json --junit-xml verispec.xml"

# the decoder: checking-decoders.md, two stages
step "models synth (checking-decoders)" 0 "verispec models synth --arch llama --out models/ --seed 0"
step "broken decoder, default mode" 1 "PYTHONPATH=. verispec check-decoder --engine mypkg.broken_decoder:factory --model models/llama-seed0.gguf"
step "decoder, confirmation design" 0 "PYTHONPATH=. verispec check-decoder --engine mypkg.decoder:factory --model models/llama-seed0.gguf --depth 8 --tv 0.2 --fraction 1"
step "decoder, default design, budget-led 300 s" 0 "PYTHONPATH=. verispec check-decoder --engine mypkg.decoder:factory --model models/llama-seed0.gguf --budget 300 --workers 2"
printf "total %.1f min\n" "$(echo "($(date +%s.%N) - $T0) / 60" | bc -l)"
