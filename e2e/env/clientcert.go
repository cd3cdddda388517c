package env

// ClientCertificate issues a client certificate from the environment's CA
// for user with groups, as kube-apiserver and the gateway's --client-ca-file
// read them (Subject CN and O). karmada-apiserver and the members trust that
// CA, and a gateway started in authorize mode is given it.
func (e *Env) ClientCertificate(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	kp, err := e.ca.issue(e.pkiDir, "client-"+user, user, groups, nil)
	if err != nil {
		return nil, nil, err
	}
	return kp.CertPEM, kp.KeyPEM, nil
}
