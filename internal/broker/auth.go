package broker

import (
	"bytes"
	"crypto/tls"
	"errors"
	"unsafe"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/logging"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Authentication
//
// A CONNECT is decided by the configured auth.Authenticator, or, when a v5 client names an
// Authentication Method, by the auth.Method of that name through an exchange of AUTH
// packets (enhanced authentication, spec 4.12). Deciding may be slow: a password hash
// costs tens of milliseconds by design. The event loop must not wait for it, so unless
// the authenticator can answer at once (auth.Quick: anonymous access, a cached success),
// the CONNECT is parked:
//
//   - its bytes are copied into the client's authState and the work goes to the auth
//     pool, a few goroutines that exist only while there is work, in the lane of the
//     client's source and under its failure budget (authfailures.go: a source blocked
//     for failed checks is refused before any of this, 0x9F);
//   - what the client sends meanwhile is kept, unread, by the packet reader (a client may
//     send packets right after CONNECT without waiting for CONNACK, spec 3.1.4) up to
//     maxHeldBytes;
//   - the pool's goroutine finishes the CONNECT under the client's lock, which OnData and
//     OnClose take too, then handles the packets that were kept.
//
// Enhanced authentication adds the wait for the client: after a step that is not done,
// the broker sends AUTH 0x18 and handles the next packets as they come; until CONNACK
// only AUTH and DISCONNECT are allowed [MQTT-3.1.2-30]. A client connected with a method
// may re-authenticate with AUTH 0x19 and the same method [MQTT-4.12.1-1]; a failure ends
// the connection with DISCONNECT 0x87 (spec 4.12.1).

// Security is what a broker asks who may connect and what they may touch. Nil fields allow
// everything: every client connects, no method is offered, every topic is open.
type Security struct {
	Authenticator auth.Authenticator
	Methods       []auth.Method
	Authorizer    auth.Authorizer
	// Remote: the Authenticator and Methods are given the client's address
	// (auth.Request.Remote). Asking the kernel for it costs a system call and two
	// allocations per CONNECT, which the built-in ones do without.
	Remote bool
}

// authentication is the broker's side of deciding CONNECTs: the pool that runs the
// checks (pool.go), the failure budget's table (authfailures.go), and the rates of the
// refusal log (refusal.go) and of the budget's "source blocked" lines. Each part has its
// own lock; the pool's is taken before the table's.
type authentication struct {
	pool      pool
	failures  authFailures
	refusals  *logging.Limiter
	budgetLog *logging.Limiter
}

// maxHeldBytes bounds what a client may send while its CONNECT is being decided; past it
// the connection is closed. Generous for a client that pipelines its first SUBSCRIBE and
// PUBLISHes, small next to a flood.
const maxHeldBytes = 256 << 10

var (
	errUnexpectedAuth = &packet.Error{Code: packet.ProtocolError, Rule: "MQTT-4.12.0-1", Text: "AUTH without an authentication method at CONNECT"}
	errAuthMethod     = &packet.Error{Code: packet.ProtocolError, Rule: "MQTT-4.12.1-1", Text: "AUTH with another authentication method than CONNECT's"}
	errAuthCode       = &packet.Error{Code: packet.ProtocolError, Rule: "MQTT-4.12.0-2", Text: "AUTH reason code out of turn"}
	errBeforeConnack  = &packet.Error{Code: packet.ProtocolError, Rule: "MQTT-3.1.2-30", Text: "packet other than AUTH or DISCONNECT during enhanced authentication"}
	errReauthIdentity = &packet.Error{Code: packet.NotAuthorized, Text: "re-authentication as another user"}
	errHeldBytes      = &packet.Error{Code: packet.ProtocolError, Text: "too much data sent while the CONNECT is being authenticated"}
)

// authState is a client's authentication in progress: the parked CONNECT, and for
// enhanced authentication the exchange and its method. It exists only while a decision
// is pending, or for the life of a connection that used enhanced authentication (which
// may re-authenticate).
type authState struct {
	h        packet.Header
	body     []byte // the CONNECT, copied; nil once connected
	cid      string // the client identifier, assigned if the client sent none
	assigned bool
	method   string
	ex       auth.Exchange
	user     string // the identity the connection has, for re-authentication
	working  bool   // a step is on the auth pool: hold what the client sends
	reauth   bool   // the exchange is a re-authentication of a connected client
	// claim is the accepted CONNECT waiting for the cluster to give this node its client
	// id (cluster_owner.go); working is set meanwhile.
	claim *admission
}

// authRequest is what the client presents, for the authenticator, in a request of its
// own; a Quick authenticator is lent the batch's instead (bt.authReq).
func (b *Broker) authRequest(cl *client, c *packet.Connect, cid string) *auth.Request {
	r := new(auth.Request)
	b.fillRequest(r, cl, c, cid)
	r.Password = bytes.Clone(r.Password)
	return r
}

// fillRequest sets r to what the client presents; r.Password is c's, in the read buffer.
func (b *Broker) fillRequest(r *auth.Request, cl *client, c *packet.Connect, cid string) {
	*r = auth.Request{
		ClientID:    cid,
		Username:    string(c.Username),
		HasUsername: c.UsernameFlag,
		Password:    c.Password,
		HasPassword: c.PasswordFlag,
		Remote:      b.remote(cl),
		Listener:    cl.conn.Listener().Name(),
	}
}

// remote is the client's address for an auth.Request, where its Security wants it.
func (b *Broker) remote(cl *client) string {
	if !b.realms.sec[cl.realm].Remote {
		return ""
	}
	return cl.conn.RemoteAddr().String()
}

// certUsername is the identity of a verified client certificate: its subject's Common
// Name, else its first DNS name, else its first email address; "" without one.
func certUsername(st *tls.ConnectionState) string {
	if st == nil || len(st.PeerCertificates) == 0 || len(st.VerifiedChains) == 0 {
		return ""
	}
	c := st.PeerCertificates[0]
	switch {
	case c.Subject.CommonName != "":
		return c.Subject.CommonName
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		return c.EmailAddresses[0]
	}
	return ""
}

// authCode is the reason code an authentication error refuses with.
func authCode(err error) packet.ReasonCode {
	var rc packet.ReasonCode
	switch {
	case errors.As(err, &rc):
		return rc
	case errors.Is(err, auth.ErrBadCredentials):
		return packet.BadUserNameOrPassword
	default:
		return packet.NotAuthorized
	}
}

// method returns the enhanced authentication method of that name, or nil.
func (b *Broker) method(cl *client, name []byte) auth.Method {
	for _, m := range b.realms.sec[cl.realm].Methods {
		if m.Name() == string(name) {
			return m
		}
	}
	return nil
}

// authenticate decides a decoded CONNECT: at once when it can, else on the auth pool. The
// caller has checked everything else about the CONNECT; c is bt.connect and body its
// bytes in the read buffer.
func (b *Broker) authenticate(bt *batch, cl *client, h packet.Header, body []byte, cid string, assigned bool) {
	c := &bt.connect
	park := func() *authState {
		st := &authState{h: h, body: append([]byte(nil), body...), cid: cid, assigned: assigned}
		cl.auth = st
		return st
	}
	if c.Version == packet.V5 && c.Props.AuthMethod != nil {
		m := b.method(cl, c.Props.AuthMethod)
		if m == nil {
			b.refuse(cl, c.Version, packet.BadAuthenticationMethod, connectRefusal("unknown authentication method", c, cid)) // [MQTT-4.12.0-1]
			return
		}
		if b.refuseBlocked(cl, c, cid) {
			return
		}
		st := park()
		st.method = m.Name()
		st.ex = m.Start(b.authRequest(cl, c, cid))
		b.step(cl, st, append([]byte(nil), c.Props.AuthData...))
		return
	}
	if cl.set.certIdentity[cl.conn.Listener().Name()] {
		// The TLS handshake verified the client certificate; it is the identity
		// (conf.TLS.UseIdentityAsUsername, as Mosquitto's use_identity_as_username).
		user := certUsername(cl.conn.TLS())
		if user == "" {
			b.refuse(cl, c.Version, authCode(auth.ErrNotAuthorized), connectRefusal("no identity in the client certificate", c, cid))
			return
		}
		b.connected(bt, cl, c, cid, assigned, auth.Result{Username: user}, nil, "")
		return
	}
	sec := &b.realms.sec[cl.realm]
	if sec.Authenticator == nil {
		b.connected(bt, cl, c, cid, assigned, auth.Result{Username: string(c.Username)}, nil, "")
		return
	}
	if q, ok := sec.Authenticator.(auth.Quick); ok {
		// Most CONNECTs are decided here (anonymous access, a cached password): on a
		// request lent from the batch, which costs the CONNECT no allocation.
		lent := &bt.authReq
		b.fillRequest(lent, cl, c, cid)
		res, err, ok := q.TryAuthenticate(lent)
		*lent = auth.Request{}
		if ok {
			if err != nil {
				b.refuseAuth(cl, c.Version, err, c, cid)
				return
			}
			b.connected(bt, cl, c, cid, assigned, res, nil, "")
			return
		}
	}
	src := b.clientSource(cl)
	if b.refuseBlockedFrom(src, cl, c, cid) {
		return
	}
	req := b.authRequest(cl, c, cid)
	st := park()
	st.working = true
	a := sec.Authenticator
	b.auth.pool.submit(src, func(refused bool) {
		if refused {
			b.throttled()
			b.authDone(cl, st, nil, true, auth.Result{}, errThrottled)
			return
		}
		res, err := a.Authenticate(req)
		if err != nil {
			b.authFailed(src)
		}
		b.authDone(cl, st, nil, true, res, err)
	})
}

// refuseBlocked refuses CONNECT c (client id cid) at once if its source is blocked by
// the failure budget (authfailures.go), and reports whether it did.
func (b *Broker) refuseBlocked(cl *client, c *packet.Connect, cid string) bool {
	return b.refuseBlockedFrom(b.clientSource(cl), cl, c, cid)
}

// refuseBlockedFrom is refuseBlocked for a client whose source is known.
func (b *Broker) refuseBlockedFrom(src source, cl *client, c *packet.Connect, cid string) bool {
	if !b.auth.failures.blocked(src, &b.live.limits.Load().auth, now()) {
		return false
	}
	b.throttled()
	b.refuseAuth(cl, c.Version, errThrottled, c, cid)
	return true
}

// step runs one step of an enhanced authentication exchange on the auth pool, in the
// client's source's lane and under its failure budget.
func (b *Broker) step(cl *client, st *authState, in []byte) {
	st.working = true
	ex := st.ex
	src := b.clientSource(cl)
	b.auth.pool.submit(src, func(refused bool) {
		if refused {
			b.throttled()
			b.authDone(cl, st, nil, true, auth.Result{}, errThrottled)
			return
		}
		out, done, res, err := ex.Step(in)
		if err != nil {
			b.authFailed(src)
		}
		b.authDone(cl, st, out, done, res, err)
	})
}

// authDone takes an authentication decision back to the client, on the auth pool's
// goroutine: under the client's lock, then the batch's flush and commit without it.
func (b *Broker) authDone(cl *client, st *authState, out []byte, done bool, res auth.Result, err error) {
	bt := b.getBatch()
	b.authDoneLocked(bt, cl, st, out, done, res, err)
	b.endBatch(bt) // its commit may wait for the store: not under cl.mu
}

func (b *Broker) authDoneLocked(bt *batch, cl *client, st *authState, out []byte, done bool, res auth.Result, err error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closing || cl.auth != st {
		return // the connection ended while the step ran
	}
	st.working = false
	switch {
	case st.reauth:
		b.reauthDone(bt, cl, st, out, done, res, err)
	case err != nil:
		c := &bt.connect
		_ = c.Decode(st.h, st.body, 0) // decoded once already; for the refusal log
		b.refuseAuth(cl, cl.r.Version, err, c, st.cid)
		return
	case !done:
		b.sendAuth(cl, packet.ContinueAuthentication, st.method, out)
	default:
		c := &bt.connect
		if err := c.Decode(st.h, st.body, 0); err != nil { // decoded once already
			b.closeNow(cl)
			return
		}
		st.body = nil
		if st.method == "" {
			cl.auth = nil // nothing to keep: only enhanced authentication re-authenticates
		} else {
			st.ex, st.user = nil, res.Username
		}
		b.connected(bt, cl, c, st.cid, st.assigned, res, out, st.method)
	}
	b.handlePackets(bt, cl)
}

// reauthDone ends a re-authentication: AUTH 0x00 on success, DISCONNECT 0x87 (or the
// error's code) on failure (spec 4.12.1), AUTH 0x18 to go on.
func (b *Broker) reauthDone(bt *batch, cl *client, st *authState, out []byte, done bool, res auth.Result, err error) {
	switch {
	case err == nil && !done:
		b.sendAuth(cl, packet.ContinueAuthentication, st.method, out)
		return
	case err == nil && res.Username != st.user:
		err = errReauthIdentity
	}
	st.reauth, st.ex = false, nil
	if err != nil {
		b.log.Info("re-authentication failed", "client", cl.s.ClientID(), "remote", cl.conn.RemoteAddr().String())
		b.protocolError(bt, cl, &packet.Error{Code: authCode(err), Text: "re-authentication failed"})
		return
	}
	a := packet.Auth{Code: packet.Success}
	a.Props.AuthMethod = []byte(st.method)
	a.Props.AuthData = out
	bt.mark(cl.s, cl.s.Send(&a))
}

// sendAuth writes an AUTH packet: through the session once connected, straight to the
// connection before CONNACK.
func (b *Broker) sendAuth(cl *client, code packet.ReasonCode, method string, data []byte) {
	a := packet.Auth{Code: code}
	a.Props.AuthMethod = []byte(method)
	a.Props.AuthData = data
	if cl.s != nil {
		if cl.s.Send(&a) {
			cl.s.Flush()
		}
		return
	}
	_, _ = cl.conn.Write(a.AppendTo(nil, packet.V5))
}

// refuseAuth refuses CONNECT c (client id cid), which failed authentication with err.
func (b *Broker) refuseAuth(cl *client, v packet.Version, err error, c *packet.Connect, cid string) {
	b.refuse(cl, v, authCode(err), connectRefusal(err.Error(), c, cid))
}

// onAuth handles an AUTH packet: the next step of an enhanced authentication, or the
// start of a re-authentication.
func (b *Broker) onAuth(cl *client, a *packet.Auth) error {
	st := cl.auth
	if st == nil || st.method == "" {
		return errUnexpectedAuth
	}
	if string(a.Props.AuthMethod) != st.method {
		return errAuthMethod // [MQTT-4.12.0-5], [MQTT-4.12.1-1]
	}
	switch {
	case a.Code == packet.ContinueAuthentication && st.ex != nil:
	case a.Code == packet.ReAuthenticate && st.ex == nil && cl.s != nil:
		m := b.method(cl, a.Props.AuthMethod)
		req := &auth.Request{ClientID: cl.s.ClientID(), Username: st.user, HasUsername: st.user != "",
			Remote: b.remote(cl), Listener: cl.conn.Listener().Name()}
		st.ex, st.reauth = m.Start(req), true
	default:
		return errAuthCode
	}
	b.step(cl, st, append([]byte(nil), a.Props.AuthData...))
	return nil
}

// handleAuthing handles a packet that arrives before CONNACK while an enhanced
// authentication waits for the client: only AUTH and DISCONNECT are allowed
// [MQTT-3.1.2-30].
func (b *Broker) handleAuthing(bt *batch, cl *client, h packet.Header, body []byte) {
	var err error
	switch h.Type {
	case packet.AUTH:
		if err = bt.auth.Decode(h, body, packet.V5); err == nil {
			err = b.onAuth(cl, &bt.auth)
		}
	case packet.DISCONNECT:
		if err = bt.disconnect.Decode(h, body, packet.V5); err == nil {
			b.closeNow(cl)
			return
		}
	default:
		err = errBeforeConnack
	}
	if err != nil {
		b.protocolError(bt, cl, err)
	}
}

// allow asks the authorizer of realm whether user (client cid) may do a to topic.
func (b *Broker) allow(realm uint8, user, cid string, a auth.Access, topic []byte) bool {
	z := b.realms.sec[realm].Authorizer
	return z == nil || z.Allow(user, cid, a, borrowString(topic))
}

// allowSession asks whether session s's identity may do a to topic.
func (b *Broker) allowSession(s *session.Session, a auth.Access, topic []byte) bool {
	user, realm := s.Identity()
	return b.allowRealm(user, realm, s.ClientID(), a, topic)
}

// allowRealm asks the authorizer of realm whether user (client cid) may do a to topic. A
// session whose owner is unknown (session.NoRealm) may do nothing.
func (b *Broker) allowRealm(user string, realm uint8, cid string, a auth.Access, topic []byte) bool {
	if int(realm) >= len(b.realms.sec) {
		return false
	}
	z := b.realms.sec[realm].Authorizer
	return z == nil || z.Allow(user, cid, a, borrowString(topic))
}

// mayRead is session.Limits.MayRead: the read ACL in force, for messages leaving a
// session's queue or window.
func (b *Broker) mayRead(user string, realm uint8, cid string, topic []byte) bool {
	return b.allowRealm(user, realm, cid, auth.Read, topic)
}

// borrowString views a topic in the read buffer as a string for the duration of an
// Authorizer call, which must not keep it (auth.Authorizer's contract: a check per
// message must not allocate), instead of copying it for every message.
func borrowString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// realms are the auth configurations a client connects under, numbered by initRealms; set
// by New and read-only after. idLog rates the lines about foreign sessions discarded
// (identity.go).
type realms struct {
	sec   []Security       // by realm
	of    map[string]uint8 // listener name → realm; absent: 0
	names []string         // each realm's name for the store: "" for 0, else its listener's
	idLog *logging.Limiter
}

// initRealms numbers the auth configurations: realm 0 is o.Security, each listener with
// its own (o.Listeners) gets the next number; the numbers hold for this run only.
// realms.names are their names (realm 0 is "", the others their listener's), which the
// store keeps with a session's owner (session.Limits.Realms). One number is left for
// session.NoRealm.
func (b *Broker) initRealms(o *Options) error {
	b.realms.sec = []Security{o.Security}
	b.realms.names = []string{""}
	b.realms.of = make(map[string]uint8, len(o.Listeners))
	for name, sec := range o.Listeners {
		if len(b.realms.sec) >= int(session.NoRealm) {
			return errors.New("broker: more than 254 listeners with their own auth settings")
		}
		b.realms.of[name] = uint8(len(b.realms.sec))
		b.realms.sec = append(b.realms.sec, sec)
		b.realms.names = append(b.realms.names, name)
	}
	return nil
}
