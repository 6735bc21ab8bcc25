// Package admin is the broker's admin API: JSON over the HTTP endpoint, under /api/v1/.
// An operator lists the clients and sessions, reads one, disconnects one, sees the
// listeners and reloads the files a reload re-reads, without PromQL or a restart.
// openapi.json describes every route; TestOpenAPIMatchesRoutes holds the two together.
//
// Files: api.go the routes and their handlers; clients.go the listings of clients and
// sessions, of one node or of a whole cluster; access.go who may call them (admin users
// of the password file, tokens of a token file; off loopback, nothing without them;
// without them, only a call whose Host names the endpoint, against DNS rebinding);
// errors.go the JSON errors; openapi.json the document, embedded.
package admin
