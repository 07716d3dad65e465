package pyghmisim

// script is the BMC: pyghmi.ipmi.bmc.Bmc with its machine in files (see the
// package documentation). argv: DIR ADDRESS USERNAME GUIDHEX; the password
// is read from DIR/password.
const script = `# Written by github.com/bmcfence/bmcfence/bmc/pyghmisim.
import os
import sys
import time

import pyghmi.ipmi.bmc as bmc

NOT_IN_PRESENT_STATE = 0xd5
NODE_BUSY = 0xc0

d, address, username, guidhex = sys.argv[1:5]
with open(os.path.join(d, 'password')) as f:
    password = f.read()
guid = list(bytes.fromhex(guidhex))


def path(name):
    return os.path.join(d, name)


def read(name, default=''):
    try:
        with open(path(name)) as f:
            return f.read().strip()
    except FileNotFoundError:
        return default


def write(name, value):
    tmp = path('.tmp-py-' + name)
    with open(tmp, 'w') as f:
        f.write(value + '\n')
    os.replace(tmp, path(name))


def log(line):
    with open(path('requests.log'), 'a') as f:
        f.write(line + '\n')


def behavior():
    parts = read('behavior', 'honest 0 0').split()
    return parts[0], float(parts[1]), float(parts[2])


def power():
    pending = read('pending-on')
    if pending and time.time() >= float(pending):
        os.remove(path('pending-on'))
        write('power', '1')
    return read('power', '0') == '1'


class SimBmc(bmc.Bmc):
    def control(self, what, want):
        log('control ' + what)
        mode, delay, dwell = behavior()
        if delay:
            time.sleep(delay)
        busy = int(read('busy-left', '0') or 0)
        if busy > 0:
            write('busy-left', str(busy - 1))
            return NODE_BUSY
        if mode == 'lying':
            return 0
        on = power()
        if what == 'cycle':
            if not on:
                return NOT_IN_PRESENT_STATE
            write('power', '0')
            if dwell > 0:
                write('pending-on', repr(time.time() + dwell))
            else:
                write('power', '1')
            return 0
        if mode == 'refusing' and on == want:
            return NOT_IN_PRESENT_STATE
        if not want:
            try:
                os.remove(path('pending-on'))  # a power off cancels a cycle
            except FileNotFoundError:
                pass
        write('power', '1' if want else '0')
        return 0

    def power_off(self):
        return self.control('off', False)

    def power_on(self):
        return self.control('on', True)

    def power_cycle(self):
        return self.control('cycle', None)

    def power_reset(self):
        log('control reset')
        return 0

    def power_shutdown(self):
        return self.control('soft', False)

    def pulse_diag(self):
        # Chassis control 04h: an NMI to the host; the power stays as it is.
        log('control diag')
        return 0

    def get_power_state(self):
        log('status')
        _, delay, _ = behavior()
        if delay:
            time.sleep(delay)
        return 'on' if power() else 'off'

    def is_active(self):
        return power()

    def handle_raw_request(self, request, session):
        if request['netfn'] == 6 and request['command'] == 0x37:
            log('guid')
            return session.send_ipmi_response(data=guid)
        return super().handle_raw_request(request, session)


b = SimBmc({username: password}, port=0, address=address)
# pyghmi keys its sessions by the BMC's port: bound to port 0 (a free one,
# chosen by the kernel), it must learn the real one.
b.port = b.serversocket.getsockname()[1]
print('listening %d' % b.port, flush=True)
b.listen()
`
