#!/usr/bin/env python3
"""make_bleu_fixtures.py: sacreBLEU's own numbers for test/test_bleu.c.

    pip install sacrebleu==2.6.0
    python3 scripts/make_bleu_fixtures.py [--data /work/shared/data] [--out test/fixtures/bleu]

Writes test/fixtures/bleu/sacrebleu_ref.json with:
  - tokenize_13a: tricky lines and sacreBLEU's Tokenizer13a output (after BLEU's rstrip()),
  - corpora: hypothesis/reference sets and sacreBLEU's corpus_bleu / CHRF statistics. Sets built
    from the shared WMT16 validation files are described only by a recipe ("base" file and a
    deterministic "perturb" rule, implemented identically in test/test_bleu.c), never copied;
    small hand-written sets (unicode, punctuation, edge cases) are stored inline,
  - cli: a small hyp/ref pair of files and the exact stdout of the sacreBLEU CLI
    (`sacrebleu REF1 REF2 -i HYP -m bleu chrf -f json -w 1`).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a


# ---------------------------------------------------------------------------------------------
# deterministic perturbations (test/test_bleu.c: perturb_line implements the same rules)
# Words are line.split(' ') (ASCII space, empty fields kept); i is the 0-based line index.

def ascii_upper(w):
    return ''.join(chr(ord(c) - 32) if 'a' <= c <= 'z' else c for c in w)


def perturb(kind, i, line):
    w = line.split(' ')
    m = len(w)
    if kind == 'identity':
        return line
    if kind == 'drop':      # drop every 5th word, phase shifted by the line index
        return ' '.join(x for j, x in enumerate(w) if (i + j) % 5 != 4)
    if kind == 'swap':      # swap word j with j+1 where (i+j) % 7 == 0, then skip both
        j = 0
        while j < m:
            if (i + j) % 7 == 0 and j + 1 < m:
                w[j], w[j + 1] = w[j + 1], w[j]
                j += 2
            else:
                j += 1
        return ' '.join(w)
    if kind == 'truncate':  # keep the first 2/3 of the words (integer division)
        return ' '.join(w[:m * 2 // 3])
    if kind == 'case':      # ASCII-uppercase every 3rd word
        return ' '.join(ascii_upper(x) if (i + j) % 3 == 0 else x for j, x in enumerate(w))
    if kind == 'empty':     # every 10th line empty, the rest dropped as 'drop'
        return '' if i % 10 == 0 else perturb('drop', i, line)
    if kind == 'mixed':     # drop then swap
        return perturb('swap', i, perturb('drop', i, line))
    raise ValueError(kind)


# ---------------------------------------------------------------------------------------------
# tricky lines (ours, not shared data)

TRICKY = [
    'He said "hello" &amp; left.',
    '&quot;Quoted&quot; text &lt;b&gt;bold&lt;/b&gt; &amp;lt; &amp;amp; &AMP; &#39;',
    'Prețul a crescut cu 3,5% la 1.234,56 lei, adică 12.000 de lei.',
    'In 2015-2016, the rate was 3.5%. In 1990-ies it was -2.',
    'Numbers: 1,000,000 and 3.14159, and .5 and 5. and ,5 and 5, and 1.2.3',
    'Şi ţara, însă â î ă ș ț: ȘȚĂÎÂ! Școala „Ion Creangă” din Iași.',
    'Dash – en — em - hyphen -- double; well-known 10-year-old 3-4 a- -b',
    "It's O'Neil's 'quote' `tick` ''double single''",
    'Email: a.b@c.com, URL http://x.y/z?q=1&r=2#frag ~user/~x',
    '(parens) [brackets] {braces} <angle> |pipe| ~tilde^ _under_ \\back $5 %6 *7 +8 =9',
    'Unicode quotes „Bună” «ziua» “hi” ‘x’ … · • ¿que? ¡ole!',
    'non\u00a0breaking\u2009thin\u3000ideographic\u2028sep\u0085nel\u202fnnbsp\u205fmm\u1680ogham',
    'trailing spaces and tabs \t \u00a0 \u3000 ',
    '   leading spaces and  double  spaces',
    '<skipped> token <skipped>x &lt;skipped&gt;',
    'a..b,,c.,d ,. e ... ,,, .a, ,a. a.',
    '1.a a.1 1,a a,1 1-a a-1 -1 1- 1--2 1.-2 a1.b2,c3',
    'U.S.A. e.g. i.e., etc. Mr. Smith Jr., Ph.D.',
    '$5.00, €3,50, £1.000 ¥20 5°C 50% 3/4 1:2',
    'emoji 😀 test 𝔘𝔫𝔦 中文，标点。 日本語、テスト',
    'ﬁ ligature Ä Ö ß É ÿ Ğ İ ı',
    'sep\x1cfile\x1dgroup\x1erecord\x1funit \x0bvt\x0cff',
    'tab\tinside and carriage\rreturn inside',
    'combining S\u0327 t\u0327 a\u0306 zero\u200bwidth soft\u00adhyphen bom\ufeff',
    '',
    '.',
    ',',
    '-',
    '&',
    'Sfârșit.',
]

# lines with embedded newlines only go through the API (tokenizer '-\n' and '\n' rules)
TRICKY_API_ONLY = [
    'hyphen-\nated line\nbreak',
    'two-\n-\nlines\n',
    'end with newline\n',
]


def corpus_stats(hyps, refs):
    """sacreBLEU numbers for a corpus; refs is a list of reference streams (None allowed)."""
    if len(hyps) == 0:
        # sacreBLEU raises IndexError on an empty corpus; record compute_bleu on zero statistics
        s = BLEU.compute_bleu([0] * 4, [0] * 4, 0, 0, smooth_method='exp')
        chrf = 0.0
        nrefs = len(refs)
    else:
        bleu = BLEU()
        s = bleu.corpus_score(hyps, refs)
        nrefs = bleu.num_refs
        # cross-check the compat entry point used by HF evaluate
        s2 = sacrebleu.corpus_bleu(hyps, refs)
        assert s2.score == s.score and s2.counts == s.counts
        chrf = CHRF().corpus_score(hyps, refs).score
    return {
        'score': s.score, 'counts': list(s.counts), 'totals': list(s.totals),
        'precisions': list(s.precisions), 'bp': s.bp, 'ratio': s.ratio,
        'sys_len': s.sys_len, 'ref_len': s.ref_len, 'nrefs': nrefs, 'chrf': chrf,
        'text': str(s),
    }


def read_lines(path):
    with open(path, encoding='utf-8', newline='\n') as f:
        return [line.rstrip() for line in f]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', default=os.environ.get('T5TRAIN_DATA', '/work/shared/data'))
    ap.add_argument('--out', default=os.path.join(os.path.dirname(__file__), '..', 'test', 'fixtures', 'bleu'))
    args = ap.parse_args()

    tok = Tokenizer13a()
    tokenize = [{'in': s, 'out': tok(s.rstrip())} for s in TRICKY + TRICKY_API_ONLY]

    corpora = []

    # --- recipes over the shared validation files
    base = {
        'ro': read_lines(os.path.join(args.data, 'wmt16-ro-en', 'validation.ro')),
        'en': read_lines(os.path.join(args.data, 'wmt16-ro-en', 'validation.en')),
    }
    recipes = [
        ('val_identity', ('ro', 'identity'), [('ro', 'identity')], 0),
        ('val_drop', ('ro', 'drop'), [('ro', 'identity')], 0),
        ('val_swap', ('ro', 'swap'), [('ro', 'identity')], 0),
        ('val_truncate', ('ro', 'truncate'), [('ro', 'identity')], 0),
        ('val_case', ('ro', 'case'), [('ro', 'identity')], 0),
        ('val_empty', ('ro', 'empty'), [('ro', 'identity')], 0),
        ('val_mixed', ('ro', 'mixed'), [('ro', 'identity')], 0),
        ('val_en_vs_ro', ('en', 'identity'), [('ro', 'identity')], 0),
        ('val_2refs', ('ro', 'mixed'), [('ro', 'identity'), ('ro', 'drop')], 0),
        ('val_3refs', ('ro', 'swap'), [('ro', 'truncate'), ('ro', 'case'), ('ro', 'drop')], 0),
        ('val_first7_truncate', ('ro', 'truncate'), [('ro', 'identity')], 7),
        ('val_first1_drop', ('ro', 'drop'), [('ro', 'identity')], 1),
    ]
    for name, (hb, hp), refspec, limit in recipes:
        n = limit or len(base[hb])
        hyps = [perturb(hp, i, base[hb][i]) for i in range(n)]
        refs = [[perturb(rp, i, base[rb][i]) for i in range(n)] for rb, rp in refspec]
        corpora.append({
            'name': name, 'source': 'validation', 'limit': limit,
            'hyp': {'base': hb, 'perturb': hp},
            'refs': [{'base': rb, 'perturb': rp} for rb, rp in refspec],
            'expect': corpus_stats(hyps, refs),
        })

    # --- inline corpora
    tr = TRICKY
    rev = [' '.join(reversed(s.split(' '))) for s in tr]
    half = [' '.join(s.split(' ')[: (len(s.split(' ')) + 1) // 2]) for s in tr]
    amp = [s.replace('&amp;', '&').replace('&', '&amp;') for s in tr]
    inline = [
        ('tricky_self', tr, [tr]),
        ('tricky_reversed', rev, [tr]),
        ('tricky_half', half, [tr]),
        ('tricky_escaped_amp', amp, [tr]),
        ('tricky_2refs', half, [tr, rev]),
        ('tricky_var_refs', rev, [tr, [None if i % 3 == 0 else s for i, s in enumerate(half)]]),
        ('tricky_api_newlines', TRICKY_API_ONLY, [[s.replace('\n', ' ') for s in TRICKY_API_ONLY]]),
        ('all_empty_hyps', ['', '', ''], [['a b c', 'd e', 'f']]),
        ('one_token', ['a'], [['a']]),
        ('no_match', ['x y z'], [['a b c']]),
        ('exp_smoothing', ['a x b y c d', 'e f g'], [['a b c d e', 'e f h']]),
        ('short_hyp', ['the cat'], [['the cat sat on the mat']]),
        ('empty_ref_lines', ['a b', '', 'c d e'], [['', 'x', 'c d e']]),
        ('closest_ref_tie', ['a b c d'], [['a b c'], ['a b c d e']]),
        ('clipping', ['the the the the the the the'], [['the cat is on the mat'], ['there is a cat on the mat']]),
        ('clipping_max_over_refs', ['the the the the'], [['the cat the'], ['the the the x']]),
        ('empty_corpus', [], [[]]),
    ]
    for name, hyps, refs in inline:
        corpora.append({'name': name, 'source': 'inline', 'hyps': hyps, 'refs': refs,
                        'expect': corpus_stats(hyps, refs)})

    # --- CLI: files without embedded newlines, two references
    cli_hyp = half
    cli_refs = [tr, rev]
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for k, lines in enumerate([cli_hyp] + cli_refs):
            p = os.path.join(d, f'f{k}.txt')
            with open(p, 'w', encoding='utf-8', newline='\n') as f:
                f.write('\n'.join(lines) + '\n')
            paths.append(p)
        env = dict(os.environ, NO_COLOR='1')
        out_json = subprocess.run(
            ['sacrebleu', paths[1], paths[2], '-i', paths[0], '-m', 'bleu', 'chrf', '-f', 'json', '-w', '1'],
            check=True, capture_output=True, text=True, env=env).stdout
        out_json2 = subprocess.run(
            ['sacrebleu', paths[1], '-i', paths[0], '-m', 'bleu', '-f', 'json', '-w', '2'],
            check=True, capture_output=True, text=True, env=env).stdout
    cli = {'hyp': cli_hyp, 'refs': cli_refs,
           'args_2refs': '-f json -w 1 --chrf', 'stdout_2refs': out_json,
           'args_1ref': '--json', 'stdout_1ref': out_json2}

    doc = {
        'generator': 'scripts/make_bleu_fixtures.py',
        'sacrebleu_version': sacrebleu.__version__,
        'python': sys.version.split()[0],
        'tokenize_13a': tokenize,
        'corpora': corpora,
        'cli': cli,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, 'sacrebleu_ref.json')
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write('\n')
    print(f'wrote {path}: {len(tokenize)} tokenizer cases, {len(corpora)} corpora '
          f'({os.path.getsize(path)} bytes)')


if __name__ == '__main__':
    main()
