// Package redfishmock is bmcfence's Redfish test peer: an http.Handler that
// serves a small, exact subset of Redfish for N computer systems, each with
// a realistic power state machine and injectable faults. It is what the
// BMC adapter's unit tests, the end-to-end harness (one process, one system
// per Kubernetes node) and `make demo` talk to, and it is checked against
// independent clients: fence_redfish, redfishtool and sushy here, gofish
// v0.23.0 and bmclib v2.3.5 in test/redfishclients, and DMTF's published
// schemas (schema_test.go).
//
// # Redfish surface
//
//	GET  /redfish                                     {"v1":"/redfish/v1/"}         (no auth)
//	GET  /redfish/v1  /redfish/v1/                    ServiceRoot, RedfishVersion 1.15.0 (no auth)
//	GET  /redfish/v1/$metadata  /redfish/v1/odata     CSDL and the OData service document (no auth)
//	GET  /redfish/v1/Systems[/{id}]                   ComputerSystem: PowerState, BootProgress, UUID, ... (ETag)
//	GET  /redfish/v1/Systems/{id}/ResetActionInfo     AllowableValues, for profiles that put them there
//	POST /redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset   {"ResetType":"ForceOff"} → 204 (or per profile)
//	GET  /redfish/v1/Chassis[/{id}]  /redfish/v1/Managers[/{id}]   one each per system, same id
//	GET  /redfish/v1/SessionService
//	GET  /redfish/v1/SessionService/Sessions
//	POST /redfish/v1/SessionService/Sessions[/Members]  {"UserName","Password"} → 201, X-Auth-Token, Location (no auth)
//	GET|DELETE /redfish/v1/SessionService/Sessions/{id}
//	GET  /redfish/v1/AccountService[/Accounts[/{n}]|/Roles[/{role}]]   predefined roles Administrator, Operator, ReadOnly
//	GET  /redfish/v1/TaskService[/Tasks[/{n}]]        tasks of 202 answers
//	GET|DELETE /redfish/v1/TaskService/TaskMonitors/{n}   202 while the task runs, then 204
//	GET  /redfish/v1/EventService                     ServerSentEventUri per profile (see "Events")
//	GET|POST /redfish/v1/EventService/Subscriptions   EventDestinations: push (POST) and SSE (open streams)
//	GET|PATCH|DELETE /redfish/v1/EventService/Subscriptions/{id}   DELETE of an SSE one closes its stream
//	POST /redfish/v1/EventService/Actions/EventService.SubmitTestEvent
//	GET  the profile's SSE URI                        text/event-stream; Last-Event-ID; $filter
//	GET  /redfish/v1/Chassis/{id}/Power               legacy PowerSupplies: input per supply
//	GET  /redfish/v1/Chassis/{id}/PowerSubsystem[/PowerSupplies[/{n}]]   LineInputStatus per supply
//	GET  /redfish/v1/PowerEquipment[/RackPDUs[/{id}[/Outlets[/{o}]]]]   rack PDUs (administrator only)
//	POST /redfish/v1/PowerEquipment/RackPDUs/{id}/Outlets/{o}/Actions/Outlet.PowerControl  {"PowerState":"Off"}
//	GET  /redfish/v1/{Systems|Managers}/{id}/LogServices[/{log}[/Entries[/{n}]]]   the system event
//	                                                  log, where the profile keeps it (below)
//
// Every answer carries OData-Version: 4.0; a GET of a resource a Link
// rel=describedby naming its DMTF schema, an ETag and an Allow header; the
// service root links the TaskService as Tasks (DSP0268); a request
// asking for another OData-Version is refused with 412 (DSP0266).
//
// Everything else needs HTTP Basic credentials or an X-Auth-Token; without
// them the answer is 401 with WWW-Authenticate: Basic realm="redfish-mock".
// Every error has the Redfish shape
// {"error":{"code":"Base.1.8.…","message":…,"@Message.ExtendedInfo":[…]}}:
// 400 for a bad or missing ResetType (ActionParameterValueNotInList,
// ActionParameterMissing), 404 for an unknown URI, 405 for a wrong method
// (with Allow), 409 for a Reset the state rules out, 503 when the session
// table is full (SessionLimitExceeded).
//
// # Vendor profiles
//
// Each system has a Profile (Config.Profile, SystemConfig.Profile, the
// binary's --profile, PUT /mock/systems/{id}/profile): what real BMCs do
// that fencing systems trip over, modelled from public vendor
// documentation (Profile.Source names it for each):
//
//	generic     everything above; ForceOff of an Off system 204
//	idrac9      AllowableValues without GracefulRestart or PowerCycle; ForceOff of an Off
//	            system (a restart's off-dwell included: the restart goes on) 409
//	            IDRAC.2.9.PSU501, On of an On system 409; after each accepted Reset the next
//	            Reset is refused 500 IDRAC.2.9.SYS518 (busy); ETag on the system
//	idrac10     idrac9, and 412 PreconditionFailed to any action POST with If-Match
//	ilo5, ilo6  400 iLO.2.x.InvalidOperationForSystemState ("Power is off"/"on"); an
//	            accepted Reset answers 200 with Base.Success in an error envelope; ilo5
//	            reports no BootProgress
//	xcc         AllowableValues in ResetActionInfo; ForceOn, no PushPowerButton (400)
//	openbmc     the system's PowerState follows the host: it reads Off while the chassis
//	            powers on; Chassis PowerState is the real power; ResetActionInfo
//	supermicro  ForceOn offered; 200 with a Base.Success message; no BootProgress
//	ami-multi   GET of the system answers 503 while it reads Off; Reset answers 202 with
//	            a task monitor; no BootProgress
//	sushy       OpenStack sushy-tools (its public source): the service root is its
//	            template (Id RedvirtService, Name "Redvirt Service"); the chassis always
//	            reads On; a system addressed by Name is answered 307 to its Id; Reset 204;
//	            no BootProgress
//
// SystemConfig.ResetTypes replaces a profile's AllowableValues (a BMC
// without ForceOff, say). Config.AuthMode makes the service basic-only (no
// SessionService) or session-only (HTTP Basic refused, 401 without
// WWW-Authenticate: Basic). A restart's off-dwell is Timing.RestartOff;
// vendors hold power off for 1-5 s in a restart, longer with a configured
// power cycle delay.
//
// # Host watchdog and log (evidence.go)
//
// Each system's BMC keeps a host watchdog and a log (see bmc/machine): a
// node-side petter arms the watchdog (PUT /mock/systems/{id}/petter) and
// pets it while the OS runs; a hang, a killed petter or an OS reboot
// through a POST longer than 120 s lets it expire, and the BMC logs the
// expiry (timer use SMS/OS), a panic (an OS Critical Stop) and each boot.
// Profiles show them as their vendors do (Profile.EvidenceSource names the
// source): generic a SEL (Systems/{id}/LogServices/SEL, SensorType
// Watchdog, timer use and action in the Message), HostWatchdogTimer and
// LastResetTime; idrac9/idrac10 the SEL under Managers/{id}/LogServices/Sel
// with MessageIds ASR0000-ASR0003 and OSE0001 (no timer use),
// HostWatchdogTimer; ilo5/ilo6 the IML (EntryType Oem), no HostWatchdogTimer;
// openbmc the EventLog with OpenBMC.0.1.IPMIWatchdog ("… timer use:
// SMS/OS"), SELEntryAdded and DCPowerOn, HostWatchdogTimer and
// LastResetTime. Every entry's Links.OriginOfCondition names its system.
//
// # Power state machine
//
// A system is On, Off, PoweringOn or PoweringOff. Nothing runs in the
// background: the state is computed from timestamps against an injected
// clock on each access (see package bmc/machine), with durations from Timing.
//
//	On                     Off → PoweringOn (PowerOn) → On; On or PoweringOn: no-op 204;
//	                       PoweringOff: 409.
//	ForceOff               On/PoweringOn → PoweringOff (PowerOff) → Off; Off: 204, or 409
//	                       with ConflictWhenOff; in a restart's Off dwell: stays Off.
//	GracefulShutdown       On → PoweringOff (GracefulShutdown) → Off, but only if the OS
//	                       is running and not hung; otherwise accepted and ignored.
//	ForceRestart,          Off for RestartOff, PoweringOn (PowerOn), On. When it reads
//	PowerCycle             Off: 409, as bmclib expects of real BMCs.
//	GracefulRestart        like ForceRestart, but ignored while the OS is hung.
//	Nmi                    accepted; no power change; a kernel set up for kdump
//	                       (PUT /mock/systems/{id}/kernel) panics.
//
// BootProgress.LastState reads None while Off, SystemHardwareInitializationComplete
// while PoweringOn and OSRunning once On, also while the OS is hung: a hung
// kernel still reads On.
//
// # Faults and events
//
// Faults (per system; see Faults) make the BMC slow (Latency), flaky
// (ErrorRate), wedged (Hang), pedantic (ConflictWhenOff), lying
// (IgnoreCommands, IgnoreDuringTransition), the host unbootable
// (PowerOnFails), the session table full (SessionLimit, SessionsExhausted),
// the identity wrong (WrongUUID) or the password stale (AuthFailure).
// Events (see Event) happen to the machine itself: power-loss,
// power-restore, os-hang, os-recover, os-reboot, os-panic.
//
// A request's faults are those of the system it concerns: the system its
// URI names, else the system its credentials are scoped to
// (SystemConfig.Username), else the only system. With several systems, give
// each its own credentials to make each look like a separate BMC; that
// matters for clients such as bmclib that read every system in the
// collection.
//
// # Events
//
// The EventService publishes every power change of a system as it
// happens (transitions that end by themselves are stamped with their end),
// numbered with one sequence: the SSE id and the EventId agree. Per
// profile (eventSpecs names the sources):
//
//	generic, xcc, openbmc  DMTF ResourceEvent registry: ResourcePoweringOff, ResourcePoweredOff,
//	                       ResourcePoweringOn, ResourcePoweredOn, MessageArgs [the system's URI],
//	                       OriginOfCondition {"@odata.id": the system's URI}
//	                       SSE at /redfish/v1/EventService/SSE (xcc: .../ServerSentEvent);
//	                       openbmc at most 10 streams
//	idrac9, idrac10        Dell Alerts: SYS1001 "System is turning off." (an off, or host power lost),
//	                       SYS1003 "System CPU Resetting." (a restart), SYS1000 "System is turning on.";
//	                       nothing when an off or on completes; EventType Alert, EventTimestamp with a
//	                       +hhmm offset; bare ids on idrac9, IDRAC.2.9.-prefixed on idrac10;
//	                       SSE at /redfish/v1/SSE, at most 2 streams, closed after an hour without data
//	ilo5, ilo6, supermicro, ami-multi   push subscriptions only: no ServerSentEventUri
//	sushy                  no EventService (and no PDUs): sushy-tools has none
//
// An SSE stream is an EventDestination (SubscriptionType SSE, a
// service-generated Context) while it is open; Last-Event-ID replays the
// buffered events after that id (EventBufferExceeded when the buffer of
// 200 no longer has it). Push subscriptions (POST Destination, Protocol
// Redfish) are delivered by POST, retried DeliveryRetryAttempts times,
// then ended; with SendHeartbeat they get HeartbeatEvent
// RedfishServiceFunctional every HeartbeatIntervalMinutes (EventsConfig.
// HeartbeatMinute shortens a minute for tests). Heartbeats are not sent on
// SSE: EventDestination says SendHeartbeat shall not apply to SSE.
// A system-scoped user's streams and subscriptions see only its system.
//
// Event faults (per system, EventFaults): replay the last N events on
// every new stream (ReplayStale), stop heartbeats (NoHeartbeats), publish
// nothing (DropEvents); and actions: drop the streams (DropStreams), send
// an event that did not happen, e.g. about another system (InjectEvent).
// Nothing runs in the background until the first subscription: then one
// goroutine publishes as transitions end, until Close.
//
// # Power supplies and PDUs
//
// A system has SystemConfig.PowerSupplies supplies (default 2); Config.PDUs
// are rack PDUs whose outlets each feed one supply ("feeds": "1/2").
// Switching an outlet off takes that supply's input away (Power:
// UnavailableOffline, Critical, 0 V; PowerSubsystem: LineInputStatus
// NoInput); a machine with one supply left runs on. A machine whose every
// supply lost input is dead, its BMC with it: requests for it hang, its
// events stop; when an input returns, the BMC answers again and the host
// reads Off. Outlets meter OnWatts (320) split across the supplies with
// input while the host is on, StandbyWatts (6) while it is off, 0 when it
// is dead or the outlet is off. ComputerSystem.Links.PoweredBy lists the
// outlets feeding a system. Mock.FailSupplies fails every supply of a
// system with its inputs kept: host and BMC die, the outlets stay on and
// meter 0 W, until it is repaired. PDU faults: IgnoreCommands (accept and do
// nothing), ConflictWhenOff (409 to Off of an off outlet), Hang.
// Mock.PDUBank serves a PDU to pdu/snmpsim (SNMP, APC PowerNet-MIB).
//
// # Control API
//
// Under /mock/, without authentication, JSON in and out. The same
// operations exist as methods on Mock.
//
//	GET    /mock/systems                 [SystemStatus, …] in configured order
//	GET    /mock/systems/{id}            SystemStatus: id, name, uuid, reportedUUID, profile, powerState,
//	                                     bootProgress, osHung, faults, timing, counters
//	                                     {requests, resets{ResetType: n}, lastResetType, lastResetTime}
//	POST   /mock/systems/{id}/events     {"event":"power-loss"|"power-restore"|"os-hang"|"os-recover"|"os-reboot"|"os-panic"}
//	GET    /mock/systems/{id}/faults     the current faults
//	PUT    /mock/systems/{id}/faults     replace: {"latency":"2s","errorRate":0.1,"hang":true,
//	                                     "conflictWhenOff":true,"ignoreCommands":true,
//	                                     "ignoreDuringTransition":true,"powerOnFails":true,
//	                                     "sessionLimit":2,"sessionsExhausted":true,
//	                                     "wrongUUID":true,"authFailure":true}
//	PATCH  /mock/systems/{id}/faults     merge the fields given into the current faults
//	DELETE /mock/systems/{id}/faults     clear every fault
//	PUT    /mock/systems/{id}/power      {"state":"On"|"Off"}: set directly, no transition
//	PUT    /mock/systems/{id}/profile    {"profile":"idrac9"}: the vendor behaviour from now on
//	PUT    /mock/systems/{id}/petter     {"timeout":"30s","action":"None"|"ResetSystem"|"PowerDown"|"PowerCycle"}:
//	                                     the node-side petter arms the watchdog and pets it
//	DELETE /mock/systems/{id}/petter     it stops on purpose (disarms); ?disarm=false: it is killed
//	GET    /mock/systems/{id}/watchdog   {armed, configured, petted, timerUse, action, timeout, remaining, expiredFlags}
//	GET    /mock/systems/{id}/log        the log: [{id, at, kind, timerUse, action, boot, origin}, …]
//	POST   /mock/systems/{id}/log        add an entry as the BMC would: {"kind":"watchdog-expired"|
//	                                     "os-critical-stop"|"system-boot","at":RFC 3339,"timerUse":"BIOS/POST",
//	                                     "action":"None","origin":"other-system"}: a stale, POST or foreign entry
//	PUT    /mock/systems/{id}/kernel     {"panicOnNMI":true}: the kernel panics on an NMI (kdump)
//	POST   /mock/reset                   every system back to its configured state; sessions and
//	                                     subscriptions end; outlets back to their configured states
//	GET|PUT|PATCH|DELETE /mock/systems/{id}/event-faults   {"replayStale":2,"noHeartbeats":true,"dropEvents":true}
//	POST   /mock/systems/{id}/drop-streams   close every SSE stream that sees the system → {"dropped":n}
//	POST   /mock/systems/{id}/inject-event   {"origin":"/redfish/v1/Systems/2","change":"PoweredOff"}
//	GET    /mock/pdus, /mock/pdus/{id}   PDUStatus: outlets with state, watts and what they feed
//	PUT    /mock/pdus/{id}/outlets/{o}   {"state":"Off"}: switched at the PDU itself
//	GET|PUT /mock/pdus/{id}/faults       {"ignoreCommands":true,"conflictWhenOff":true,"hang":true}
//
// Successful changes answer 200 with the system's SystemStatus (POST
// /mock/reset answers 204). Bad input is 400 with a message saying what to
// fix (unknown fields are errors), an unknown system 404, an event the
// system's state rules out (os-hang on a system that is Off) 409.
//
// Durations are Go duration strings ("250ms", "45s") everywhere: in the
// control API, in LoadConfig's YAML and in SystemStatus.
package redfishmock
