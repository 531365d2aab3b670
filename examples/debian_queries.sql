-- Questions over the Debian store that examples/debian_load.sql builds. Run from the repository root:
--   duckdb -unsigned build/debian.duckdb -cmd "LOAD 'build/mentat.duckdb_extension'" < examples/debian_queries.sql
--
-- The rules, passed as the `%` input of each query that needs them:
-- * (dep ?p ?q): ?p depends (Depends or Pre-Depends, any alternative of a group) on ?q, where ?q is the name
--   the dependency names (a package, or a virtual package's name entity) or a package that provides that name.
--   This is what `apt-cache depends --recurse` follows (tests/test_debian.py compares the two).
-- * (closure ?p ?q): ?q is reached from ?p through one or more dep steps (a recursive rule).
SET VARIABLE deb_rules = '[[(dep ?p ?q) (or [?d :dep/kind :depends] [?d :dep/kind :pre-depends]) [?d :dep/of ?p] [?d :dep/target ?q]]
                          [(dep ?p ?q) (or [?d :dep/kind :depends] [?d :dep/kind :pre-depends]) [?d :dep/of ?p] [?d :dep/target ?t] [?q :pkg/provides ?t]]
                          [(closure ?p ?q) (dep ?p ?q)]
                          [(closure ?p ?q) (closure ?p ?x) (dep ?x ?q)]]';

.print '1. The transitive dependency closure of python3: how many names, and the real packages among them'
SELECT names.count_q AS closure_names, real_packages.count_q AS real_packages
FROM mentat_q('[:find (count ?q) . :in $ % ?name :where [?p :pkg/name ?name] (closure ?p ?q)]',
                       inputs := '[' || getvariable('deb_rules') || ' "python3"]') AS names,
              mentat_q('[:find (count ?q) . :in $ % ?name
                         :where [?p :pkg/name ?name] (closure ?p ?q) [?q :pkg/version _]]',
                       inputs := '[' || getvariable('deb_rules') || ' "python3"]') AS real_packages;

.print '2. The packages that most others depend on directly (Depends or Pre-Depends)'
SELECT * FROM mentat_q('[:find ?name (count-distinct ?p)
                         :where (or [?d :dep/kind :depends] [?d :dep/kind :pre-depends]) [?d :dep/target ?q]
                                [?d :dep/of ?p] [?q :pkg/name ?name]]')
ORDER BY 2 DESC LIMIT 10;

.print '3. The installed size of a package with its whole closure (KiB): what apt would install on an empty system'
SELECT * FROM mentat_q('[:find ?name (sum ?size) :with ?q :in $ % [?name ...]
                         :where [?p :pkg/name ?name] (closure ?p ?q) [?q :pkg/installed-size ?size]]',
                       inputs := '[' || getvariable('deb_rules') || ' ["bash" "python3" "libreoffice-writer" "gimp"]]')
ORDER BY 2 DESC;

.print '4. Maintainers with the most packages in each of four sections'
SELECT * FROM (
  SELECT *, row_number() OVER (PARTITION BY section ORDER BY count_p DESC, maint) AS r FROM mentat_q(
    '[:find ?section ?maint (count ?p) :in $ [?section ...]
      :where [?p :pkg/section ?section] [?p :pkg/maintainer ?m] [?m :maint/name ?maint]]',
    inputs := '[["games" "science" "python" "kernel"]]'))
WHERE r <= 3 ORDER BY section, r;

.print '5. Fulltext joined with the graph: web servers whose closure pulls in OpenSSL (libssl3), best matches first'
SELECT * FROM mentat_q('[:find ?name ?score :in $ % ?search
                         :where [(fulltext $ :pkg/description ?search) [[?p _ _ ?score]]]
                                [?ssl :pkg/name "libssl3"] (closure ?p ?ssl) [?p :pkg/name ?name]
                         :order (desc ?score) :limit 10]',
                       inputs := '[' || getvariable('deb_rules') || ' "+\"web server\" http"]');

.print '6. Fulltext with the query syntax: Python libraries for astronomy, not the documentation packages'
SELECT * FROM mentat_q('[:find ?name ?summary ?score
                         :where [(fulltext $ :pkg/description "+astronom* +python -documentation") [[?p _ _ ?score]]]
                                [?p :pkg/name ?name] [?p :pkg/summary ?summary]
                         :order (desc ?score) :limit 10]');

.print '7. Virtual packages with the most providers'
SELECT * FROM mentat_q('[:find ?virtual (count ?p)
                         :where [?p :pkg/provides ?v] [?v :pkg/name ?virtual] [(missing? $ ?v :pkg/version)]]')
ORDER BY 2 DESC LIMIT 10;

.print '8. Debtags: the user interfaces of the packages in section games'
SELECT * FROM mentat_q('[:find ?tag (count ?p)
                         :where [?p :pkg/section "games"] [?p :pkg/tag ?tag]
                                [(str ?tag) ?text] [(starts-with? ?text ":interface/")]]')
ORDER BY 2 DESC;

.print '9. Who depends on libssl3 through a version constraint, and which constraints'
SELECT * FROM mentat_q('[:find ?op ?version (count ?p)
                         :where [?t :pkg/name "libssl3"] [?d :dep/target ?t] [?d :dep/op ?op] [?d :dep/version ?version]
                                [?d :dep/of ?p]]')
ORDER BY 3 DESC LIMIT 5;
