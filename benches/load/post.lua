-- wrk script: POST the same JSON body on every request.
-- The body is read once from the file named by $OMNISYM_BODY (scripts/load.sh sets it to
-- symbolicate-body.json with the symbols directory filled in, scripts/jvm-load.sh to
-- jvm-body.json with the mapping's directory, uuid and frames filled in).

local path = os.getenv("OMNISYM_BODY")
if path == nil or path == "" then
  error("set OMNISYM_BODY to the request body file")
end
local file = assert(io.open(path, "rb"))
local body = file:read("*a")
file:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"

-- The LOADSUMMARY line, from summary.lua next to this file.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "summary.lua")
