package server

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

// The admin API's credentials on a reconfiguration: http.admin.users and the token file
// (its path and its contents, re-read at every Reconfigure) take effect for the calls
// that follow, without a restart. The file is read before anything changes, so a bad
// one changes nothing; the diff names users and token names, never a token.

// restartAdminOff is why an http.admin change waits when the API did not start.
const restartAdminOff = "the admin API is off (no credentials off loopback, or its token file did not load at start); takes effect only after a restart"

// readAdmin reads target's token file for applyAdmin, and refuses a target that would
// leave the running API without credentials off loopback.
func (b *Server) readAdmin(target *conf.Config) (auth.Tokens, error) {
	if b.admin.Load() == nil {
		return auth.Tokens{}, nil
	}
	a := target.HTTP.Admin
	if len(a.Users) == 0 && a.TokenFile == "" && !conf.IsLoopback(target.HTTP.Address) {
		return auth.Tokens{}, fmt.Errorf("bifrost: refusing to leave the admin API without credentials on %s; nothing changed:\nhttp.admin: no users and no token_file", target.HTTP.Address)
	}
	t, err := auth.ReadTokens(a.TokenFile)
	if err != nil {
		return auth.Tokens{}, fmt.Errorf("bifrost: admin token file; nothing changed:\n%w", err)
	}
	return t, nil
}

// applyAdmin puts target's admin users and tokens in force, logs what changed and
// returns the change of the tokens for the report (the users' is conf's own change).
func (b *Server) applyAdmin(target *conf.Config, t auth.Tokens) []conf.Change {
	acc := b.admin.Load()
	if acc == nil {
		return nil
	}
	d := acc.Set(target.HTTP.Admin.Users, t)
	if d.Empty() {
		return nil
	}
	b.log.Info("reconfigure: admin access", "users_added", d.UsersAdded, "users_removed", d.UsersRemoved,
		"tokens_added", d.TokensAdded, "tokens_removed", d.TokensRemoved, "tokens_changed", d.TokensChanged)
	if len(d.TokensAdded)+len(d.TokensRemoved)+len(d.TokensChanged) == 0 {
		return nil
	}
	return []conf.Change{{Field: "http.admin.tokens", Old: tokenNames(d.OldTokens, nil), New: tokenNames(d.NewTokens, d.TokensChanged)}}
}

// tokenNames is one side of the tokens' change: their names, each whose token was
// replaced marked so.
func tokenNames(names, changed []string) string {
	if len(names) == 0 {
		return "(none)"
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n
		if slices.Contains(changed, n) {
			out[i] += " (new token)"
		}
	}
	return strings.Join(out, ", ")
}
