-- wrk script: a plain GET of the URL (scripts/health-load.sh: `GET /healthcheck`), with
-- the LOADSUMMARY line of summary.lua next to this file.

wrk.method = "GET"

dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "summary.lua")
