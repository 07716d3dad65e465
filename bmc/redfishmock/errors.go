package redfishmock

import (
	"encoding/json"
	"net/http"
)

// Redfish Base registry message IDs the mock answers with. The registry
// version is the one named in the error bodies clients are known to parse;
// clients match on the suffix, if at all.
const (
	msgActionParameterMissing         = "Base.1.8.ActionParameterMissing"
	msgActionParameterValueNotInList  = "Base.1.8.ActionParameterValueNotInList"
	msgInternalError                  = "Base.1.8.InternalError"
	msgMalformedJSON                  = "Base.1.8.MalformedJSON"
	msgNoValidSession                 = "Base.1.8.NoValidSession"
	msgPropertyValueNotInList         = "Base.1.8.PropertyValueNotInList"
	msgResourceInStandby              = "Base.1.8.ResourceInStandby"
	msgResourceInUse                  = "Base.1.8.ResourceInUse"
	msgResourceMissingAtURI           = "Base.1.8.ResourceMissingAtURI"
	msgServiceTemporarilyUnavailable  = "Base.1.8.ServiceTemporarilyUnavailable"
	msgSessionLimitExceeded           = "Base.1.8.SessionLimitExceeded"
	msgActionNotSupported             = "Base.1.8.ActionNotSupported"
	msgCreateFailedMissingReqProperty = "Base.1.8.CreateFailedMissingReqProperties"
	msgPreconditionFailed             = "Base.1.8.PreconditionFailed"
)

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code         string        `json:"code"`
	Message      string        `json:"message"`
	ExtendedInfo []messageInfo `json:"@Message.ExtendedInfo"`
}

type messageInfo struct {
	ODataType  string `json:"@odata.type"`
	MessageID  string `json:"MessageId"`
	Message    string `json:"Message"`
	Severity   string `json:"Severity"`
	Resolution string `json:"Resolution"`
}

// writeError answers with a Redfish error body: the shape every client
// (gofish's common.Error, sushy's exceptions, redfishtool) knows how to read.
func writeError(w http.ResponseWriter, status int, code, message, resolution string) {
	if resolution == "" {
		resolution = "None."
	}
	writeJSON(w, status, errorBody{Error: errorDetail{
		Code:    code,
		Message: message,
		ExtendedInfo: []messageInfo{{
			ODataType:  "#Message.v1_1_1.Message",
			MessageID:  code,
			Message:    message,
			Severity:   "Critical",
			Resolution: resolution,
		}},
	}})
}

// writeJSON answers with v as JSON. Encoding the mock's own types cannot
// fail, so an error here means the client went away and there is no one to
// tell.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"code":"` + msgInternalError + `","message":"cannot encode the response"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("OData-Version", "4.0")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
