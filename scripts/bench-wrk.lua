-- wrk script: each request takes the next pre-signed body from BENCH_BODIES (path \t signature \t body).
local requests = {}
local index = 0
local threads = 0

-- Each thread starts at its own share of the bodies, so action ids do not repeat across threads.
function setup(thread)
  thread:set("thread_id", threads)
  threads = threads + 1
end

function init(args)
  -- Each thread loads only its own share of the lines: action ids never repeat across threads,
  -- and no thread holds the whole file.
  local file = assert(io.open(os.getenv("BENCH_BODIES"), "r"))
  local threads_total = tonumber(os.getenv("BENCH_THREADS") or "2")
  local n = 0
  for line in file:lines() do
    if n % threads_total == (thread_id or 0) then
      local path, sig, body = line:match("^([^\t]+)\t([^\t]+)\t(.*)$")
      requests[#requests + 1] = wrk.format("POST", path, {
        ["Content-Type"] = "application/json", ["X-Trello-Webhook"] = sig }, body)
    end
    n = n + 1
  end
  file:close()
end

function request()
  index = index % #requests + 1
  return requests[index]
end
