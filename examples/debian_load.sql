-- Loads Debian's package archive (this machine's apt lists) into the mentat store `mentat`.
--
-- First turn the apt lists into Parquet (apt-get update -o Acquire::Languages=en brings Translation-en):
--   python3 examples/debian_extract.py build/debian
-- then, from the repository root:
--   duckdb -unsigned build/debian.duckdb -cmd "LOAD 'build/mentat.duckdb_extension'" \
--          -cmd "SET VARIABLE debian_dir = 'build/debian'" -cmd "SET VARIABLE examples_dir = 'examples'" \
--          < examples/debian_load.sql
--
-- The model (examples/debian_schema.edn):
-- * A package is an entity with a unique :pkg/name; a name that only dependencies or Provides mention (a virtual
--   package such as mail-transport-agent, or a package of no list) is an entity with only its :pkg/name, created
--   by the import that refers to it (missing_refs := 'create'). So a dependency on a virtual package points at
--   that name's entity, and [?p :pkg/provides ?v] leads from the name to the real packages that provide it.
-- * Each alternative of a Depends / Pre-Depends / Recommends / Suggests group is one :dep entity: :dep/of (the
--   depending package), :dep/kind, :dep/group (the group's index in its field), :dep/alt (the alternative's index
--   in its group: `a | b` is alt 0 and 1 of one group), :dep/target, and the version constraint as :dep/op and
--   :dep/version (absent when there is none).
-- * Maintainers are entities (:maint/name, the whole "Name <email>" text); :pkg/description, the long
--   description of Translation-en, is a fulltext attribute, indexed by the import itself.
-- * Debtags and Provides are cardinality-many: mentat_import writes one value per row and one row per entity, so
--   they are transacted as EDN built by one SQL aggregate each.

.print 'schema'
SET VARIABLE debian_schema = (SELECT content FROM read_text(getvariable('examples_dir') || '/debian_schema.edn'));
SELECT tx, datoms FROM mentat_transact(getvariable('debian_schema'));

CREATE OR REPLACE TEMP MACRO debian(t) AS 'read_parquet(''' || getvariable('debian_dir') || '/' || t || '.parquet'')';

.print 'packages (with maintainers, descriptions and the fulltext index)'
SELECT 'packages' AS "table", * FROM mentat_import(
    'SELECT name AS ":pkg/name", version AS ":pkg/version", section AS ":pkg/section",
            '':'' || priority AS ":pkg/priority", installed_size AS ":pkg/installed-size",
            maintainer AS ":pkg/maintainer", source AS ":pkg/source", description AS ":pkg/summary",
            long_description AS ":pkg/description"
     FROM ' || debian('packages'),
    refs := '{:pkg/maintainer :maint/name}', missing_refs := 'create');

.print 'dependencies'
SELECT 'dependencies' AS "table", * FROM mentat_import(
    'SELECT package AS ":dep/of", '':'' || kind AS ":dep/kind", grp AS ":dep/group", alt AS ":dep/alt",
            target AS ":dep/target", op AS ":dep/op", version AS ":dep/version"
     FROM ' || debian('deps'),
    refs := '{:dep/of :pkg/name :dep/target :pkg/name}', missing_refs := 'create');

.print 'provides and debtags'
SET VARIABLE debian_provides = (
    SELECT '[' || string_agg('[:db/add ' || to_json('v:' || provided) || ' :pkg/name ' || to_json(provided) || '] '
                             || '[:db/add [:pkg/name ' || to_json(package) || '] :pkg/provides '
                             || to_json('v:' || provided) || ']', ' ') || ']'
    FROM read_parquet(getvariable('debian_dir') || '/provides.parquet'));
SELECT 'provides' AS "table", datoms FROM mentat_transact(getvariable('debian_provides'));
SET VARIABLE debian_tags = (
    SELECT '[' || string_agg('[:db/add [:pkg/name ' || to_json(name) || '] :pkg/tag :' || replace(tag, '::', '/') || ']', ' ')
           || ']'
    FROM (SELECT name, unnest(tags) AS tag FROM read_parquet(getvariable('debian_dir') || '/packages.parquet'))
    WHERE regexp_matches(tag, '^[a-z0-9-]+::[a-z0-9+.-]+$'));
SELECT 'debtags' AS "table", datoms FROM mentat_transact(getvariable('debian_tags'));
CHECKPOINT;
