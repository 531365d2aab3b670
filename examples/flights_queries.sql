-- Analytical Datalog over the flights store (load it with examples/flights_load.sql first).
--
-- Every statement below is marked `-- query: <name>`; tests/test_flights.py runs each one and checks its answer
-- against the same question asked in plain SQL over the CSV files. mentat_q returns a table, so SQL around it
-- orders, pivots and formats the result.
--
-- Aggregates follow Datomic: they run over the set of found tuples, so `:with ?f` keeps one delay per flight
-- (without it two flights with the same delay would count once).

.print ''
.print '1. Average departure delay (minutes) by airline; cancelled flights have no delay and are skipped'
-- query: delay_by_airline
SELECT name AS airline, round(avg_delay, 2) AS avg_dep_delay, count_f AS flights
FROM mentat_q('[:find ?name (avg ?delay) (count ?f)
                :with ?f
                :where [?f :flight/carrier ?a]
                       [?a :airline/name ?name]
                       [?f :flight/dep-delay ?delay]]')
ORDER BY avg_dep_delay DESC, airline;

.print ''
.print '2. Flights per destination airport (the 10 busiest, by airport name; destinations missing from airports.csv have no name)'
-- query: flights_per_dest
SELECT name AS destination, count_f AS flights
FROM mentat_q('[:find ?name (count ?f)
                :where [?f :flight/dest ?d]
                       [?d :airport/name ?name]]')
ORDER BY flights DESC, destination
LIMIT 10;

.print ''
.print '3. Share of flights flown by planes built before 1990, per carrier (flights whose plane has a known year)'
-- query: old_planes
SELECT code AS carrier,
       round(100.0 * coalesce(sum(count_f) FILTER (WHERE old), 0) / sum(count_f), 2) AS pct_before_1990,
       sum(count_f)::BIGINT AS flights
FROM mentat_q('[:find ?code ?old (count ?f)
                :where [?f :flight/carrier ?a]
                       [?a :airline/code ?code]
                       [?f :flight/plane ?p]
                       [?p :plane/year ?year]
                       [(< ?year 1990) ?old]]')
GROUP BY code
ORDER BY pct_before_1990 DESC, carrier;

.print ''
.print '4. Departure delay when it rains at the origin in the scheduled hour (weather joined on airport + time-hour)'
-- query: rain_delay
SELECT code AS origin,
       round(max(avg_delay) FILTER (WHERE NOT rain), 2) AS dry_delay,
       round(max(avg_delay) FILTER (WHERE rain), 2) AS rain_delay,
       max(count_f) FILTER (WHERE rain) AS flights_in_rain
FROM mentat_q('[:find ?code ?rain (avg ?delay) (count ?f)
                :with ?f
                :where [?f :flight/origin ?o]
                       [?o :airport/faa ?code]
                       [?f :flight/time-hour ?t]
                       [?w :weather/origin ?o]
                       [?w :weather/time-hour ?t]
                       [?w :weather/precip ?precip]
                       [(> ?precip 0) ?rain]
                       [?f :flight/dep-delay ?delay]]')
GROUP BY code
ORDER BY origin;

.print ''
.print '5. Destinations that only exist as a reference (missing from airports.csv): flights per FAA code'
-- query: unknown_dests
SELECT faa AS destination, count_f AS flights
FROM mentat_q('[:find ?faa (count ?f)
                :where [?f :flight/dest ?d]
                       [?d :airport/faa ?faa]
                       (not [?d :airport/name _])]')
ORDER BY flights DESC, destination;
