package redfishmock

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Tasks: profiles that answer a Reset with 202 (ami-multi) hand the client
// a task monitor (DSP0266 "Asynchronous operations"). The Reset takes
// effect at once, as the machine model has it; the task reads Running
// until the command's own duration (the power-off time for an off) has
// passed on the mock's clock, then Completed. GET of the monitor answers
// 202 while the task runs and 204 (the Reset's own answer) once it is done.

// maxTasks bounds the task table: BMCs keep a few dozen.
const maxTasks = 64

type task struct {
	id       string
	systemID string
	reset    ResetType
	start    time.Time
	end      time.Time
}

type taskTable struct {
	mu     sync.Mutex
	lastID uint64
	order  []string
	byID   map[string]*task
}

func newTaskTable() *taskTable { return &taskTable{byID: map[string]*task{}} }

func (t *taskTable) add(systemID string, rt ResetType, start, end time.Time) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastID++
	id := strconv.FormatUint(t.lastID, 10)
	t.byID[id] = &task{id: id, systemID: systemID, reset: rt, start: start, end: end}
	t.order = append(t.order, id)
	if len(t.order) > maxTasks {
		delete(t.byID, t.order[0])
		t.order = t.order[1:]
	}
	return id
}

func (t *taskTable) get(id string) (task, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk, ok := t.byID[id]
	if !ok {
		return task{}, false
	}
	return *tk, true
}

func (t *taskTable) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byID = map[string]*task{}
	t.order = nil
}

func (t *taskTable) ids() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.order...)
}

// document is the Task resource as of now.
func (t *taskTable) document(id string, now time.Time) map[string]any {
	tk, ok := t.get(id)
	if !ok {
		return nil
	}
	state, status := "Running", "OK"
	doc := map[string]any{
		"@odata.id":   "/redfish/v1/TaskService/Tasks/" + id,
		"@odata.type": "#Task.v1_7_0.Task",
		"Id":          id,
		"Name":        "ComputerSystem.Reset " + string(tk.reset) + " of system " + tk.systemID,
		"TaskMonitor": "/redfish/v1/TaskService/TaskMonitors/" + id,
		"StartTime":   tk.start.UTC().Format(time.RFC3339),
	}
	if !now.Before(tk.end) {
		state = "Completed"
		doc["EndTime"] = tk.end.UTC().Format(time.RFC3339)
		doc["Messages"] = []any{map[string]any{"MessageId": "Base.1.8.Success", "Message": "Successfully Completed Request", "Severity": "OK"}}
	}
	doc["TaskState"], doc["TaskStatus"] = state, status
	return doc
}

func taskService() map[string]any {
	return map[string]any{
		"@odata.id":      "/redfish/v1/TaskService",
		"@odata.type":    "#TaskService.v1_2_1.TaskService",
		"Id":             "TaskService",
		"Name":           "Task Service",
		"ServiceEnabled": true,
		"Tasks":          link{"/redfish/v1/TaskService/Tasks"},
	}
}

func (m *Mock) writeTasks(w http.ResponseWriter) {
	var members []link
	for _, id := range m.tasks.ids() {
		members = append(members, link{"/redfish/v1/TaskService/Tasks/" + id})
	}
	if members == nil {
		members = []link{}
	}
	writeDescribed(w, "TaskCollection", collectionDoc{
		ODataContext: "/redfish/v1/$metadata#TaskCollection.TaskCollection", ODataID: "/redfish/v1/TaskService/Tasks",
		ODataType: "#TaskCollection.TaskCollection", Name: "Tasks", Count: len(members), Members: members,
	})
}

func (m *Mock) writeTask(w http.ResponseWriter, id string) {
	doc := m.tasks.document(id, m.clock.Now())
	if doc == nil {
		writeNotFound(w, "/redfish/v1/TaskService/Tasks/"+id)
		return
	}
	writeDescribed(w, "Task.v1_7_0", doc)
}

// serveTaskMonitor answers a task monitor: 202 with the Task while it runs,
// 204 once done; DELETE forgets the task.
func (m *Mock) serveTaskMonitor(w http.ResponseWriter, r *http.Request, id string) {
	now := m.clock.Now()
	tk, ok := m.tasks.get(id)
	if !ok {
		writeNotFound(w, "/redfish/v1/TaskService/TaskMonitors/"+id)
		return
	}
	if r.Method == http.MethodDelete {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if now.Before(tk.end) {
		w.Header().Set("Location", "/redfish/v1/TaskService/TaskMonitors/"+id)
		writeJSON(w, http.StatusAccepted, m.tasks.document(id, now))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
