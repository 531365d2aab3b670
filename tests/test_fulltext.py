"""Fulltext search (`:db/fulltext` attributes, the `fulltext` query function) through the built extension.

Every expected score is computed here from the BM25 formula (k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) /
(df + 0.5))) over term lists written by hand (English stems: "dogs" -> "dog", "barking" -> "bark"); none is
copied from mentat's output. The differential test ranks the same corpus with tantivy (PyPI), whose analyzer
(simple tokenizer, lowercase, the same Snowball English stemmer) gives the same terms on ASCII words.
"""
import json
import math
import pathlib
import random
import subprocess
import sys


import pytest

from conftest import connect, q, rows, transact

K1, B = 1.2, 0.75

SCHEMA = """[
 {:db/ident :doc/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :doc/text :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/fulltext true}
 {:db/ident :doc/rank :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :doc/note :db/valueType :db.type/string :db/cardinality :db.cardinality/many :db/fulltext true}
 {:db/ident :doc/plain :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
]"""

# name -> (text, its terms written by hand, rank)
CORPUS = {
    "d1": ("The quick brown fox", ["the", "quick", "brown", "fox"], 1),
    "d2": ("The big dog and the cat", ["the", "big", "dog", "and", "the", "cat"], 2),
    "d3": ("Dogs barking at cats", ["dog", "bark", "at", "cat"], 3),
    "d4": ("A fox and a dog", ["a", "fox", "and", "a", "dog"], 4),
}


def idf(n, df):
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def tf_part(tf, dl, avgdl):
    return tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))


def bm25(docs, clauses):
    """Scores of `docs` ({name: terms}) for a list of optional clauses, each a list of terms (one term, or a
    phrase) or ("prefix", p): {name: score} of the documents matching any clause."""
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n

    def phrase_tf(terms, want):
        return sum(1 for i in range(len(terms) - len(want) + 1) if terms[i : i + len(want)] == want)

    out = {}
    for name, terms in docs.items():
        s, hit = 0.0, False
        for c in clauses:
            if isinstance(c, tuple):
                for t in sorted({t for d in docs.values() for t in d if t.startswith(c[1])}):
                    tf = terms.count(t)
                    if tf:
                        df = sum(1 for d in docs.values() if t in d)
                        s += idf(n, df) * tf_part(tf, len(terms), avgdl)
                        hit = True
                continue
            tf = phrase_tf(terms, c)
            if tf:
                w = sum(idf(n, sum(1 for d in docs.values() if phrase_tf(d, [t]))) for t in c)
                s += w * tf_part(tf, len(terms), avgdl)
                hit = True
        if hit:
            out[name] = s
    return out


def load(con, store=None):
    transact(con, SCHEMA, store)
    maps = " ".join(
        f'{{:db/id "{n}" :doc/name "{n}" :doc/text "{t}" :doc/rank {r}}}' for n, (t, _, r) in CORPUS.items()
    )
    transact(con, f"[{maps}]", store)


def search(con, text, attr=":doc/text", store=None, **opts):
    extra = "".join(f", {k} := {v!r}" for k, v in opts.items())
    if store:
        extra += f", store := '{store}'"
    q = f"""[:find ?name ?score :in $ ?s :where [(fulltext $ {attr} ?s) [[?e _ _ ?score]]] [?e :doc/name ?name]]"""
    return dict(rows(con, f"SELECT * FROM mentat_q(?, inputs := ?{extra})", [q, f'["{esc(text)}"]']))


def esc(s):
    return s.replace("\\", "\\\\").replace('"', '\\"')


def docs_now():
    return {n: terms for n, (_, terms, _) in CORPUS.items()}


def assert_scores(got, want):
    assert set(got) == set(want), (got, want)
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-12), k


def test_tokenizer_sql_function(con):
    assert rows(con, "SELECT mentat_tokenize('Dogs, Café-owners RUNNING!')")[0][0] == ["dog", "cafe", "owner", "run"]
    assert rows(con, "SELECT mentat_tokenize('Dogs running', 'none')")[0][0] == ["dogs", "running"]
    assert rows(con, "SELECT mentat_tokenize(NULL)")[0][0] is None
    with pytest.raises(Exception, match="klingon"):
        rows(con, "SELECT mentat_tokenize('x', 'klingon')")
    # a NULL text is NULL, whatever the language (SQL's rule for a NULL argument); the language is not read
    for f in ("mentat_tokenize", "mentat_postings"):
        assert rows(con, f"SELECT {f}(t, 'klingon') FROM (VALUES (NULL::VARCHAR)) v(t)") == [(None,)]


def test_postings_sql_function(con):
    """mentat_postings(text, language) is a text as one document of the postings table: its distinct terms, each
    with its frequency and 0-based positions and the document's length; the same terms as mentat_tokenize."""

    def postings(text, lang=None):
        arg = "?" if lang is None else "?, ?"
        got = rows(con, f"SELECT mentat_postings({arg})", [text] if lang is None else [text, lang])[0][0]
        return None if got is None else sorted((p["term"], p["tf"], p["pos"], p["len"]) for p in got)

    assert postings("The dog and the Dogs") == [("and", 1, [2], 5), ("dog", 2, [1, 4], 5), ("the", 2, [0, 3], 5)]
    assert postings("Running files", "none") == [("files", 1, [1], 2), ("running", 1, [0], 2)]
    assert postings(" -- ") == [] and postings(None) is None
    text = " ".join(t for t, _, _ in CORPUS.values()) + " Café-owners don't run; running dogs run 3.14 times"
    terms = rows(con, "SELECT mentat_tokenize(?)", [text])[0][0]
    want = sorted((t, terms.count(t), [i for i, x in enumerate(terms) if x == t], len(terms)) for t in set(terms))
    assert postings(text) == want
    with pytest.raises(Exception, match="klingon"):
        rows(con, "SELECT mentat_postings('x', 'klingon')")


def test_bm25_terms_by_hand(con):
    load(con)
    d = docs_now()
    assert_scores(search(con, "fox"), bm25(d, [["fox"]]))
    both = search(con, "dog cats")
    assert_scores(both, bm25(d, [["dog"], ["cat"]]))
    # more matching terms score higher: d2 and d3 hold both terms, d4 only "dog"
    assert min(both["d2"], both["d3"]) > both["d4"]
    assert search(con, "zebra") == {}
    assert search(con, "") == {} and search(con, "  --  ") == {}


def test_required_excluded_phrase_prefix(con):
    load(con)
    d = docs_now()
    # +required: only documents with "dog"; "cat" still adds to their score
    want = {k: v for k, v in bm25(d, [["dog"], ["cat"]]).items() if "dog" in d[k]}
    assert_scores(search(con, "+dog cat"), want)
    # -excluded
    assert_scores(search(con, "dog -cat"), {"d4": bm25(d, [["dog"]])["d4"]})
    assert search(con, "-cat") == {}
    # "exact phrases": consecutive positions, in order
    assert_scores(search(con, '"the big dogs"'), bm25(d, [["the", "big", "dog"]]))
    assert search(con, '"dog the"') == {}
    assert_scores(search(con, '"and a dog"'), bm25(d, [["and", "a", "dog"]]))
    assert set(search(con, '+"a dog" fox')) == {"d4"}
    # prefix*: every term starting with "b" (brown, big, bark), unstemmed prefix
    assert_scores(search(con, "b*"), bm25(d, [("prefix", "b")]))
    assert_scores(search(con, "+ca* -do*"), {})
    assert set(search(con, "qu* -fox")) == set()


def test_repeated_and_mixed_clauses(con):
    """The single-term clauses of a search are scored together, in one read of their postings (planner/src/fulltext.rs,
    `words_sql`); the answers are those of one clause at a time: a term that two clauses name scores twice, a
    required term is required whichever of its clauses says so, and words mix with prefixes, phrases and
    exclusions."""
    load(con)
    d = docs_now()

    def where(scores, *terms):
        return {k: v for k, v in scores.items() if all(t in d[k] for t in terms)}

    assert_scores(search(con, "dog dog"), {k: 2 * v for k, v in bm25(d, [["dog"]]).items()})
    assert_scores(search(con, "dog +dog cat"), where(bm25(d, [["dog"], ["dog"], ["cat"]]), "dog"))
    assert_scores(search(con, "+dog +cat fox"), where(bm25(d, [["dog"], ["cat"], ["fox"]]), "dog", "cat"))
    assert_scores(search(con, '+fox b* "the big"'), where(bm25(d, [["fox"], ("prefix", "b"), ["the", "big"]]), "fox"))
    want = {k: v for k, v in bm25(d, [["dog"], ["cat"]]).items() if "fox" not in d[k]}
    assert set(want) == {"d2", "d3"}
    assert_scores(search(con, "dog cat -fox"), want)
    assert_scores(search(con, "cat -cat"), {})


def test_composes_with_clauses_order_limit(con):
    load(con)
    d = docs_now()
    want = bm25(d, [["dog"], ["cat"]])
    top = sorted(want, key=lambda k: -want[k])[:2]
    q = """[:find ?name ?rank ?score :in $ ?s
            :where [(fulltext $ :doc/text ?s) [[?e ?v ?tx ?score]]] [?e :doc/name ?name] [?e :doc/rank ?rank]
                   [(> ?rank 1)]
            :order (desc ?score) :limit 2]"""
    got = rows(con, "SELECT * FROM mentat_q(?, inputs := ?)", [q, '["dog cat"]'])
    assert [r[0] for r in got] == top and [r[1] for r in got] == [CORPUS[k][2] for k in top]
    # ?v and ?tx bind the datom
    q = """[:find ?v ?tx :where [(fulltext $ :doc/text "fox") [[?e ?v ?tx _]]] [?e :doc/name "d1"]]"""
    (v, tx), = rows(con, "SELECT * FROM mentat_q(?)", [q])
    assert v == "The quick brown fox" and tx > 2**40
    # a constant search
    q = """[:find (count ?e) . :where [(fulltext $ :doc/text "dog") [[?e]]]]"""
    assert rows(con, "SELECT * FROM mentat_q(?)", [q]) == [(3,)]


def test_errors(con):
    load(con)
    with pytest.raises(Exception, match="not :db/fulltext"):
        rows(con, """SELECT * FROM mentat_q('[:find ?e :where [(fulltext $ :doc/plain "x") [[?e]]]]')""")
    with pytest.raises(Exception, match="present database"):
        rows(con, """SELECT * FROM mentat_q('[:find ?e :where [(fulltext $ :doc/text "x") [[?e]]]]', as_of := 0)""")
    with pytest.raises(Exception, match="present database"):
        rows(con, """SELECT * FROM mentat_q('[:find ?e :where [(fulltext $ :doc/text "x") [[?e]]]]', history := true)""")
    with pytest.raises(Exception, match="fulltext"):
        rows(con, """SELECT * FROM mentat_q('[:find ?e :where [?e :doc/name ?n] [(fulltext $ :doc/text ?n) [[?e]]]]')""")
    with pytest.raises(Exception, match="cardinality"):
        transact(con, "[{:db/id :doc/text :db/cardinality :db.cardinality/many}]")


def test_retraction_and_replacement_update_the_index(con):
    load(con)
    transact(con, '[{:doc/name "d1" :doc/text "Cats and more cats"}]')  # cardinality-one replacement
    transact(con, '[[:db/retractEntity [:doc/name "d4"]]]')
    transact(con, '[[:db/retract [:doc/name "d3"] :doc/text "Dogs barking at cats"]]')
    d = {"d1": ["cat", "and", "more", "cat"], "d2": CORPUS["d2"][1]}
    assert_scores(search(con, "cat fox dog"), bm25(d, [["cat"], ["fox"], ["dog"]]))
    assert search(con, "fox") == {}
    assert rows(con, "SELECT count(*) FROM mentat.ftd_" + str(text_aid(con)))[0][0] == 2
    assert_statistics_counted(con)
    aid = text_aid(con)
    # "fox" is in no document now: its dictionary row stays, with df 0
    assert rows(con, f"SELECT df FROM mentat.ftt_{aid} WHERE term = 'fox'") == [(0,)]


def text_aid(con):
    return rows(con, "SELECT entid FROM mentat_schema() WHERE ident = ':doc/text'")[0][0]


def index_state(con, store="mentat"):
    aid = text_aid(con)
    return [
        rows(con, f"SELECT t.term, p.e, p.h, p.tf, p.pos FROM {store}.ft_{aid} p JOIN {store}.ftt_{aid} t USING (tid) "
                  "ORDER BY ALL"),
        rows(con, f"SELECT * FROM {store}.ftd_{aid} ORDER BY ALL"),
        rows(con, f"SELECT * FROM {store}.ftt_{aid} ORDER BY ALL"),
        rows(con, f"SELECT * FROM {store}.fts_{aid}"),
    ]


def assert_statistics_counted(con, store="mentat"):
    """The dictionary's df and the statistics row, which the writers keep, equal what the postings and documents
    hold when counted."""
    aid = text_aid(con)
    assert rows(con, f"SELECT term, df FROM {store}.ftt_{aid} WHERE df > 0 ORDER BY term") == rows(
        con, f"SELECT t.term, count(*) FROM {store}.ft_{aid} p JOIN {store}.ftt_{aid} t USING (tid) "
             "GROUP BY t.term ORDER BY t.term")
    assert rows(con, f"SELECT n, total FROM {store}.fts_{aid}") == rows(
        con, f"SELECT count(*), coalesce(sum(len), 0) FROM {store}.ftd_{aid}")
    # a term keeps its id once its documents are gone: ids are never reused
    assert rows(con, f"SELECT count(*) = count(DISTINCT tid) FROM {store}.ftt_{aid}") == [(True,)]


def test_failed_transaction_leaves_the_index_unchanged(con):
    load(con)
    before = index_state(con)
    # a unique conflict after fulltext datoms in the same transaction
    with pytest.raises(Exception):
        transact(con, '[{:doc/name "d9" :doc/text "zebra zebra"} {:db/id "x" :doc/name "d1" :doc/text "okapi"} '
                      '[:db/cas [:doc/name "d2"] :doc/rank 99 5]]')
    out = rows(con, "SELECT error FROM mentat_transact_many(?)",
               [['[{:doc/name "d8" :doc/text "zebra"} [:db/cas [:doc/name "d2"] :doc/rank 99 5]]']])
    assert out[0][0] is not None
    assert index_state(con) == before
    assert search(con, "zebra okapi") == {}


def test_cardinality_many_documents(con):
    load(con)
    transact(con, '[{:doc/name "d1" :doc/note ["red apples" "green apples and pears"]} '
                  '{:doc/name "d2" :doc/note ["pears"]}]')
    docs = {"n1": ["red", "appl"], "n2": ["green", "appl", "and", "pear"], "n3": ["pear"]}
    want = bm25(docs, [["pear"], ["appl"]])
    q = """[:find ?v ?score :where [(fulltext $ :doc/note "pears apples") [[_ ?v _ ?score]]]]"""
    got = dict(rows(con, "SELECT * FROM mentat_q(?)", [q]))
    names = {"n1": "red apples", "n2": "green apples and pears", "n3": "pears"}
    assert set(got) == set(names.values())
    for k, v in want.items():
        assert got[names[k]] == pytest.approx(v, rel=1e-12)
    transact(con, '[[:db/retract [:doc/name "d1"] :doc/note "red apples"]]')
    got = dict(rows(con, "SELECT * FROM mentat_q(?)", [q]))
    assert set(got) == {"green apples and pears", "pears"}


def test_import_indexes_and_replaces(con):
    transact(con, SCHEMA)
    con.execute("CREATE TABLE src AS SELECT * FROM (VALUES ('d1', 'The quick brown fox', 1), "
                "('d2', 'The big dog and the cat', 2), ('d3', 'Dogs barking at cats', 3), ('d4', 'A fox and a dog', 4))"
                " t(\":doc/name\", \":doc/text\", \":doc/rank\")")
    con.execute("SELECT * FROM mentat_import('SELECT * FROM src')").fetchall()
    d = docs_now()
    assert_scores(search(con, "fox dog"), bm25(d, [["fox"], ["dog"]]))
    # an upserting import replaces d1's text (cardinality one) and adds d5
    con.execute("""SELECT * FROM mentat_import($$SELECT * FROM (VALUES ('d1', 'cats cats'), ('d5', 'a lone fox'))
                   t(":doc/name", ":doc/text")$$)""").fetchall()
    d["d1"] = ["cat", "cat"]
    d["d5"] = ["a", "lone", "fox"]
    assert_scores(search(con, "fox cat"), bm25(d, [["fox"], ["cat"]]))


def test_export_import_keeps_the_index(con, tmp_path):
    load(con)
    transact(con, '[{:doc/name "d1" :doc/note ["red apples"]}]')
    want = search(con, "dog fox")
    out = str(tmp_path / "export")
    con.execute("SELECT * FROM mentat_export(?)", [out]).fetchall()
    con.execute("SELECT * FROM mentat_import_store(?, store := 'copy')", [out]).fetchall()
    assert index_state(con, "copy") == index_state(con)
    assert search(con, "dog fox", store="copy") == want
    con.execute("SELECT * FROM mentat_attach_parquet(?, store := 'att')", [out]).fetchall()
    assert search(con, "dog fox", store="att") == want


def test_store_language_none(db_path):
    # a store whose meta row says no stemming, written before the store is opened by the process that indexes
    # (a process keeps a store's schema, language included, once opened: each step runs in a fresh process)
    def run(code):
        script = f"import json, sys; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r}); " \
                 f"import conftest, test_fulltext as t; con = conftest.connect({str(db_path)!r}); {code}"
        return subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout

    run("conftest.transact(con, '[{:db/ident :x/y :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]', "
        "'plain'); con.execute(\"INSERT INTO plain.meta VALUES ('fulltext_language', 'none')\")")
    out = run("t.load(con, 'plain'); "
              "print(json.dumps([t.search(con, 'dogs', store='plain'), t.search(con, 'dog', store='plain')]))")
    dogs, dog = json.loads(out.strip().splitlines()[-1])
    unstemmed = {n: t.lower().split() for n, (t, _, _) in CORPUS.items()}
    assert_scores(dogs, bm25(unstemmed, [["dogs"]]))
    assert dog.keys() == {"d2", "d4"}



def in_a_process(db_path, code):
    """Runs `code` in a Python process of its own (a process keeps a store open, and its schema, while the
    extension is loaded), with `json`, `conftest`, this module as `t` and `con` connected to `db_path`; returns the
    JSON value its last line prints."""
    script = (f"import json, sys; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r}); import conftest, "
              f"test_fulltext as t; con = conftest.connect({str(db_path)!r}); {code}")
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_set_language_rebuilds_the_index(db_path):
    # mentat_fulltext_language switches an indexed store from English stems to no stemming in one transaction:
    # the index is rebuilt with the new analyzer, searches analyze with it, later writes index with it, and the
    # choice is in the file: the first step runs in its own process, the rest in a fresh one that reads it back
    # (a process keeps the database open while the extension is loaded)
    english, report = in_a_process(db_path, "t.load(con); print(json.dumps([sorted(t.search(con, 'dogs')), "
                                            "conftest.rows(con, \"SELECT * FROM mentat_fulltext_language('NONE')\")]))")
    assert english == ["d2", "d3", "d4"]  # English: "dogs" and "dog" are one stem
    unstemmed = {n: t.lower().split() for n, (t, _, _) in CORPUS.items()}
    # two fulltext attributes (:doc/text, :doc/note); four documents of :doc/text, none of :doc/note
    assert report == [["none", 2, 4, sum(len(t) for t in unstemmed.values())]]
    con = connect(db_path)
    assert_scores(search(con, "dogs"), bm25(unstemmed, [["dogs"]]))
    assert search(con, "dog").keys() == {"d2", "d4"}
    assert rows(con, "SELECT value FROM mentat.meta WHERE key = 'fulltext_language'") == [("none",)]
    transact(con, '[{:db/id "d5" :doc/name "d5" :doc/text "Barking dogs" :doc/rank 5}]')
    assert search(con, "barking").keys() == {"d3", "d5"} and search(con, "bark") == {}
    # an unknown language is refused by name and changes nothing
    with pytest.raises(Exception, match="klingon"):
        rows(con, "SELECT * FROM mentat_fulltext_language('klingon')")
    assert search(con, "barking").keys() == {"d3", "d5"} and search(con, "bark") == {}
    # and back to English: stems again, over every current document
    assert rows(con, "SELECT language, documents FROM mentat_fulltext_language('english')") == [("english", 5)]
    assert search(con, "dog").keys() == {"d2", "d3", "d4", "d5"}
    assert search(con, "bark").keys() == {"d3", "d5"}
    con.close()

WORDS = """time person year way day thing man world life hand part child eye woman place work week case point
government company number group problem fact be have do say get make go know take see come think look want give
use find tell ask seem feel try leave call good new first last long great little own other old right big high
different small large next early young important few public bad same able running runner runs jumped jumping
network networks networking database databases library libraries package packages packaging system systems
file files filing server servers serve served serving graph graphs query queries search searching searched""".split()


def corpus(n, seed=7):
    rnd = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(WORDS))]
    return [" ".join(rnd.choices(WORDS, weights, k=rnd.randint(3, 40))) for _ in range(n)]


def test_ranking_matches_tantivy(con, tmp_path):
    tantivy = pytest.importorskip("tantivy")
    texts = corpus(2000)
    transact(con, SCHEMA)
    con.execute("CREATE TABLE src AS SELECT 'd' || i AS \":doc/name\", t AS \":doc/text\" "
                "FROM (SELECT unnest(?) AS t, generate_subscripts(?, 1) AS i)", [texts, texts])
    con.execute("SELECT * FROM mentat_import('SELECT * FROM src')").fetchall()

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("name", stored=True, tokenizer_name="raw")
    sb.add_text_field("text", stored=False, tokenizer_name="en_simple_stem", index_option="position")
    schema = sb.build()
    index = tantivy.Index(schema, path=str(tmp_path))
    analyzer = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
                .filter(tantivy.Filter.lowercase()).filter(tantivy.Filter.stemmer("english")).build())
    index.register_tokenizer("en_simple_stem", analyzer)
    w = index.writer(heap_size=50_000_000, num_threads=1)
    for i, t in enumerate(texts, 1):
        w.add_document(tantivy.Document(name=f"d{i}", text=t))
    w.commit()
    index.reload()
    searcher = index.searcher()
    queries = ["network", "database library", "running graph", "files servers search", "+package query",
               "system -file", '"big network"', "old woman", "+queries +database", "life world",
               "seem feel", "jumped", "public company -government", '"new first"', "serve", "hand eye",
               "number group problem", "+searching graph", "libraries packaging", "young child"]
    for qtext in queries:
        top = searcher.search(index.parse_query(qtext, ["text"]), 10)
        theirs = [(searcher.doc(a)["name"][0], s) for s, a in top.hits]
        ours = rows(con, """SELECT * FROM mentat_q('[:find ?name ?score :in $ ?s
                              :where [(fulltext $ :doc/text ?s) [[?e _ _ ?score]]] [?e :doc/name ?name]
                              :order (desc ?score) ?name :limit 10]', inputs := ?)""", [f'["{esc(qtext)}"]'])
        assert len(ours) == len(theirs), qtext
        if not ours:
            continue
        shared = {n for n, _ in ours} & {n for n, _ in theirs}
        assert len(shared) >= 8 or len(shared) == len(ours), (qtext, ours, theirs)
        # the same first score (ties may order differently); every document is at most 40 terms long, so
        # tantivy's one-byte length codes are exact and the scores differ only by its f32 arithmetic
        assert ours[0][1] == pytest.approx(theirs[0][1], rel=1e-5), qtext
        theirs_by_name = dict(theirs)
        for n, s in ours:
            if n in theirs_by_name:
                assert s == pytest.approx(theirs_by_name[n], rel=1e-5), (qtext, n)


def test_fulltext_over_a_second_source(con):
    # `(fulltext $2 ...)` searches the store given for $2 (sources :=), joined with `$`'s datoms
    load(con)
    load(con, "other")
    transact(con, '[{:doc/name "d1" :doc/text "cats only"}]', "other")
    d = docs_now()
    d["d1"] = ["cat", "onli"]
    want = bm25(d, [["cat"]])
    got = dict(q(con, """[:find ?name ?score :in $ $2
                          :where [(fulltext $2 :doc/text "cat") [[?o _ _ ?score]]] [$2 ?o :doc/name ?name]
                                 [?e :doc/name ?name] [?e :doc/text _]]""", sources='{$2 "other"}'))
    assert_scores(got, want)


# The fulltext tables of layout version 2 (export format 1 and 2), before the term dictionary: postings keyed by the
# term's text, as docs/parquet-format.md gives them. Written here from this build's index, then read back.
TO_EARLIER_LAYOUT = """
CREATE TABLE {s}.old_ft AS SELECT t.term, p.e, p.h, p.tf, p.pos, p.len FROM {s}.ft_{a} p JOIN {s}.ftt_{a} t USING (tid);
DROP TABLE {s}.ft_{a}; DROP TABLE {s}.ftt_{a}; DROP TABLE {s}.fts_{a};
ALTER TABLE {s}.old_ft RENAME TO ft_{a};
UPDATE {s}.meta SET value = '2' WHERE key = 'layout_version';
"""


def test_an_index_of_the_earlier_layout_is_rebuilt_on_open(db_path):
    # step 1 (its own process, which keeps the store open): an index, its searches, then the tables made as layout
    # version 2 wrote them; step 2, a fresh process: the first open rebuilds the index in this layout
    want = in_a_process(db_path, "t.load(con); want = [t.search(con, s) for s in t.OLD_SEARCHES]; "
                                 "con.execute(t.TO_EARLIER_LAYOUT.format(s='mentat', a=t.text_aid(con))); "
                                 "print(json.dumps(want))")
    con = connect(db_path)
    for text, w in zip(OLD_SEARCHES, want):
        assert_scores(search(con, text), w)
    assert rows(con, "SELECT value FROM mentat.meta WHERE key = 'layout_version'") == [("3",)]
    assert_statistics_counted(con)
    d = docs_now()
    assert_scores(search(con, "fox dog"), bm25(d, [["fox"], ["dog"]]))


OLD_SEARCHES = ["fox dog", '"the big"', "+dog -cat", "ca*", "cats"]


def test_an_export_of_the_earlier_format_imports_and_attaches(con, tmp_path):
    # an export of format 2 (postings keyed by the term's text, no dictionary or statistics files): an import
    # rebuilds the index from the datoms, an attach reads it through views of this layout; the same answers
    load(con)
    want = [search(con, s) for s in OLD_SEARCHES]
    out = tmp_path / "export"
    con.execute("SELECT * FROM mentat_export(?)", [str(out)]).fetchall()
    m = json.loads((out / "manifest.json").read_text())
    files = {f["table"]: f for f in m["files"]}
    for a in (f["attribute"] for f in m["files"] if f["table"].startswith("ftt_")):
        post = out / files[f"ft_{a}"]["path"]
        con.execute(f"COPY (SELECT t.term, p.e, p.h, p.tf, p.pos, p.len FROM read_parquet('{post}') p JOIN "
                    f"read_parquet('{out / files[f'ftt_{a}']['path']}') t USING (tid)) TO '{tmp_path / 'old.parquet'}'")
        (tmp_path / "old.parquet").replace(post)
    m["format_version"] = 2
    m["files"] = [f for f in m["files"] if not f["table"].startswith(("ftt_", "fts_"))]
    for name in ("manifest.json", f"manifest.{m['basis_tx']}.json"):
        (out / name).write_text(json.dumps(m))
    for f in files.values():
        if f["table"].startswith(("ftt_", "fts_")):
            (out / f["path"]).unlink()
    con.execute("SELECT * FROM mentat_import_store(?, store := 'imp')", [str(out)]).fetchall()
    con.execute("SELECT * FROM mentat_attach_parquet(?, store := 'att')", [str(out)]).fetchall()
    for store in ("imp", "att"):
        for text, w in zip(OLD_SEARCHES, want):
            assert_scores(search(con, text, store=store), w)
    assert_statistics_counted(con, "imp")


def test_one_group_that_rewrites_a_document_keeps_the_index_exact(con):
    # members of one group (mentat_transact_many) assert, replace, retract and assert again the same documents in
    # one DuckDB transaction: each later member unindexes what an earlier one indexed in it
    load(con)
    out = rows(con, "SELECT error FROM mentat_transact_many(?)", [[
        '[{:doc/name "d5" :doc/text "zebra crossing"}]',
        '[{:doc/name "d5" :doc/text "zebra zebra okapi"}]',
        '[[:db/retract [:doc/name "d1"] :doc/text "The quick brown fox"]]',
        '[{:doc/name "d1" :doc/text "okapi fox"} {:doc/name "d6" :doc/text "crossing"}]',
        '[[:db/retractEntity [:doc/name "d6"]]]',
    ]])
    assert [r[0] for r in out] == [None] * 5
    d = docs_now()
    d["d5"] = ["zebra", "zebra", "okapi"]
    d["d1"] = ["okapi", "fox"]
    assert_scores(search(con, "zebra okapi fox crossing"), bm25(d, [["zebra"], ["okapi"], ["fox"], ["crossing"]]))
    assert_statistics_counted(con)
