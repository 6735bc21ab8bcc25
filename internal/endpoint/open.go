package endpoint

import (
	"encoding/json"
	"net/http"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/admin"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
	"github.com/bifrost-mqtt/bifrost/internal/httplink"
)

var _ httplink.Server = (*Server)(nil)

// Open opens the server's endpoint as env describes it: the endpoint's own paths, the
// admin API (unless it would be open off loopback) and, on a cluster node, /cluster.
// The endpoint package registers it with httplink.
func Open(env httplink.Env) (httplink.Server, error) {
	acc := adminAccess(env)
	srv, err := Listen(env.Config.HTTP, env.Metrics, env.Logger, acc)
	if err != nil || srv == nil {
		return nil, err
	}
	if acc != nil {
		mountAdmin(srv, env, acc)
		srv.AddPaths("/api/v1/ /dashboard/")
	}
	if c := env.Cluster; c != nil {
		srv.Handle("GET /cluster", srv.views()(srv.clusterStatus(c)))
		srv.AddPaths("/cluster")
	}
	return srv, nil
}

// clusterStatus answers GET /cluster with the node's Status as indented JSON.
func (s *Server) clusterStatus(c clusterlink.Views) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(c.Status()); err != nil {
			s.log.Debug("http /cluster: write failed", "err", err)
		}
	}
}

// adminAccess returns the admin users and tokens the admin API, and the routes that
// ask for the admin credentials, check; nil when the API stays off, as it does when it
// would be open off loopback or its token file does not load (the log says why).
func adminAccess(env httplink.Env) *auth.AdminAccess {
	cfg := env.Config.HTTP.Admin
	if len(cfg.Users) == 0 && cfg.TokenFile == "" && !conf.IsLoopback(env.Config.HTTP.Address) {
		env.Logger.Warn("admin API off: http.address is not on loopback and http.admin names no users or token_file")
		return nil
	}
	acc, err := auth.NewAdminAccess(cfg.Users, cfg.TokenFile, env.CheckAdmin)
	if err != nil {
		env.Logger.Error("admin API off", "err", err)
		return nil
	}
	return acc
}

// mountAdmin mounts the admin API (internal/admin) on the endpoint, checking acc.
func mountAdmin(srv *Server, env httplink.Env, acc *auth.AdminAccess) {
	if env.AdminOn != nil {
		env.AdminOn(acc)
	}
	mqtt := env.Broker
	o := admin.Options{Broker: mqtt, Access: acc, Hosts: srv.access.hosts, Log: env.Logger, Reload: env.Reload, Config: env.MaskedConfig,
		Metrics: env.Metrics, Source: mqtt,
		Listeners: func() []admin.Listener {
			var out []admin.Listener
			for _, l := range mqtt.Listeners() {
				out = append(out, admin.Listener{Name: l.Name(), Type: l.Type(), Address: l.Addr().String(), Connections: l.Conns()})
			}
			return out
		}}
	if c := env.Cluster; c != nil {
		o.Nodes = env.Metrics.Nodes
		o.Cluster = c
		o.Owner = func(cid string) (string, string) {
			node, _ := c.Owner(cid)
			return node, c.NodeName()
		}
	}
	admin.Register(srv, o)
}
