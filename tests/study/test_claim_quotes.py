"""Every claim the study tests is the paper's own words where it says it quotes them.

A claim whose source names a paper's abstract must quote that abstract word for word: the two abstracts are
kept below as arXiv gives them (2309.08586, Wortsman et al. 2023; 2302.06461, Shen et al. 2023). Inside a
quote, "..." leaves words out and "[...]" stands for the quote's own words of context; every other piece must
appear in the abstract, in order. A claim that is not a quote says so ("paraphrase: ...") and names the figure
it summarises. And the pages (README, docs, slides, the tutorials' text): a double-quoted passage that shares
four running words with an abstract must be that abstract's words.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from reluattn.study.experiments import EXPERIMENTS
from reluattn.study.grids import SHEN, WORTSMAN

from train_helpers import ROOT

ABSTRACTS = {
    WORTSMAN: (
        "Previous research observed accuracy degradation when replacing the attention softmax with a point-wise "
        "activation such as ReLU. In the context of vision transformers, we find that this degradation is "
        "mitigated when dividing by sequence length. Our experiments training small to large vision transformers "
        "on ImageNet-21k indicate that ReLU-attention can approach or match the performance of softmax-attention "
        "in terms of scaling behavior as a function of compute."),
    SHEN: (
        "The Transformer architecture consists of self-attention and feed-forward networks (FFNs) which can be "
        "viewed as key-value memories according to previous works. However, FFN and traditional memory utilize "
        "different activation functions (i.e., ReLU and Softmax respectively), which makes them not equivalent. "
        "In this paper, we first rebuild the connections between FFN and key-value memory by conducting extensive "
        "studies on ReLU and Softmax, and find they are equivalent when adding an additional layer normalization "
        "module on Softmax. In addition, ReLU outperforms Softmax on both FFN and key-value memory when the number "
        "of value slots is large. We analyze the reasons and then explore this good property of ReLU on the "
        "self-attention network where the original Softmax activation performs poorly on long input sequences. "
        "We then propose a full ReLU architecture named ReLUFormer which performs better than the baseline "
        "Transformer on long sequence tasks such as document translation. This paper sheds light on the following "
        "points: 1) Softmax and ReLU use different normalization methods over elements which lead to different "
        "variances of results, and ReLU is good at dealing with a large number of key-value slots; 2) FFN and "
        "key-value memory are equivalent, and thus the Transformer can be viewed as a memory network where FFNs "
        "and self-attention networks are both key-value memories."),
}

CLAIMS = [(name, index, claim) for name, record in sorted(EXPERIMENTS.items())
          for index, claim in enumerate(record.claims)]
ABSTRACT_CLAIMS = [(name, index, claim) for name, index, claim in CLAIMS if "abstract" in claim.source]


def ids(claims) -> list[str]:
    return [f"{name}-{index}" for name, index, _ in claims]


def quoted_pieces(quote: str) -> list[str]:
    """The pieces of a quote that are the paper's words: what lies between "..." and "[...]" marks."""
    return [piece.strip() for piece in re.split(r"\.\.\.|\[[^\]]*\]", quote) if piece.strip()]


def paper_of(claim) -> str | None:
    """The paper whose abstract is kept here and whose name the claim's source starts with."""
    return next((paper for paper in ABSTRACTS if claim.source.startswith(paper)), None)


def appear_in_order(pieces: list[str], text: str) -> bool:
    position = 0
    for piece in pieces:
        position = text.find(piece, position)
        if position < 0:
            return False
        position += len(piece)
    return True


def test_quoted_pieces_drop_elisions_and_context():
    assert quoted_pieces("[FFN and memory] are equivalent ... on Softmax") == ["are equivalent", "on Softmax"]
    assert appear_in_order(["a b", "d"], "a b c d") and not appear_in_order(["d", "a b"], "a b c d")


@pytest.mark.parametrize("name, index, claim", CLAIMS, ids=ids(CLAIMS))
def test_a_claim_names_its_paper_and_is_a_quote_or_a_marked_paraphrase(name, index, claim):
    assert paper_of(claim), claim.source
    if claim.quote.startswith("paraphrase:"):
        assert "Fig." in claim.source, f"{name}: a paraphrase names the figure it summarises"
    else:
        assert "abstract" in claim.source or "Fig." in claim.source, f"{name}: where the words stand"


@pytest.mark.parametrize("name, index, claim", ABSTRACT_CLAIMS, ids=ids(ABSTRACT_CLAIMS))
def test_a_claim_citing_an_abstract_quotes_it_word_for_word(name, index, claim):
    pieces = quoted_pieces(claim.quote)
    assert pieces and appear_in_order(pieces, ABSTRACTS[paper_of(claim)]), (
        f"{name}: {claim.quote!r} is not the words of {paper_of(claim)}'s abstract")


TITLES = ("Replacing softmax with ReLU in Vision Transformers", "A Study on ReLU and Softmax in Transformer")
PAGES = ["README.md", *sorted(str(path.relative_to(ROOT)) for folder in ("docs", "course/slides")
                              for path in (ROOT / folder).rglob("*.md")
                              if "_build" not in path.parts and "run-logs" not in path.parts),
         *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tutorials").glob("0*.ipynb"))]


def prose(path: Path) -> str:
    """A page's text (a notebook's markdown cells), its line breaks and indents as single spaces."""
    text = path.read_text()
    if path.suffix == ".ipynb":
        cells = json.loads(text)["cells"]
        text = " ".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
    return re.sub(r"\s+", " ", text)


def misquotes(text: str) -> list[str]:
    """Double-quoted passages that share four running words with an abstract but are not its words."""
    abstracts = " ".join(ABSTRACTS.values())
    found = []
    for quote in re.findall(r'"([^"]{20,400})"', text):
        words = quote.split()
        echoes = any(" ".join(words[i:i + 4]) in abstracts for i in range(len(words) - 3))
        if echoes and quote not in TITLES and not appear_in_order(quoted_pieces(quote), abstracts):
            found.append(quote)
    return found


def test_misquotes_finds_a_changed_word():
    assert misquotes('they say "we find that this degradation vanishes when dividing by sequence length"')
    assert not misquotes('they say "we find that this degradation is mitigated when dividing by sequence length"')


@pytest.mark.parametrize("page", PAGES)
def test_the_docs_quote_the_abstracts_word_for_word(page):
    assert misquotes(prose(ROOT / page)) == []
