-- Argo CD health check for specdeploy.io/SpeculativeDeployment (Lua 5.1, as Argo CD runs it).
-- Healthy: Ready=True for the current generation. Degraded: the operator reports Degraded=True
-- (a blocked spec: PairingFailed, NoNodeFits, InvalidEngineConfig, ...; or a failed rollout),
-- or Ready=False for a reason that is not a rollout in progress. Progressing: anything else,
-- including no status yet and a status for an older generation.
local hs = {}

local function condition(conditions, name)
  for _, c in ipairs(conditions) do
    if c.type == name then
      return c
    end
  end
  return nil
end

local function describe(c)
  if c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return c.reason or c.type
end

-- Reasons of Ready=False while the operator rolls out; any other reason is a failure.
local rolling = { WaitingForReplicas = true, Starting = true, RollingOut = true }

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local ready = condition(status.conditions, "Ready")
local progressing = condition(status.conditions, "Progressing")
local degraded = condition(status.conditions, "Degraded")

if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(degraded)
  return hs
end
if ready ~= nil and ready.status == "False" and ready.reason ~= nil and not rolling[ready.reason] then
  hs.status = "Degraded"
  hs.message = describe(ready)
  return hs
end
if progressing ~= nil and progressing.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(progressing)
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end
hs.status = "Progressing"
hs.message = ready ~= nil and describe(ready) or "Waiting for the Ready condition"
return hs
