package scsi

import (
	"encoding/binary"
	"sync/atomic"
)

// LOG SENSE (SPC-4 6.7): the pages hosts poll for health (sg_logs,
// smartd, ESXi and Windows health queries). The counters are honest:
// this array corrects no error, so the corrected-error counters are zero;
// the uncorrected ones count the MEDIUM ERRORs the LU reported (media
// faults injected into its store). There is no temperature sensor: the
// temperature is reported as FFh, "unable to return a temperature".

// Log page codes.
const (
	logSupported    = 0x00
	logWriteErrors  = 0x02
	logReadErrors   = 0x03
	logTemperature  = 0x0d
	logInfoExcept   = 0x2f
	logSubpagesList = 0xff // subpage code: supported pages and subpages
)

var logPages = []byte{logSupported, logWriteErrors, logReadErrors, logTemperature, logInfoExcept}

// logCounters are a LU's error counters: touched only when a command
// fails, never on the I/O path.
type logCounters struct {
	readErrs, writeErrs atomic.Uint64
}

// countMediaErr counts a MEDIUM ERROR the LU is about to report.
func (lu *LU) countMediaErr(err error) error {
	if se, ok := err.(*SenseError); ok {
		switch se.Reason {
		case ReasonMediumReadError:
			lu.logs.readErrs.Add(1)
		case ReasonMediumWriteError:
			lu.logs.writeErrs.Add(1)
		}
	}
	return err
}

func logSense(x *exec) ([]byte, error) {
	cdb := x.cdb()
	if cdb[1]&0x01 != 0 { // SP: saving log parameters is not offered
		return nil, InvalidCDBField(1, 0)
	}
	if cdb[1]&0x02 != 0 { // PPC: only changed parameters (obsolete)
		return nil, InvalidCDBField(1, 1)
	}
	pc, code, sub := cdb[2]>>6, cdb[2]&0x3f, cdb[3]
	ptr := be16(cdb[5:])
	allocLen := int(be16(cdb[7:]))
	var params []byte
	spf := false
	switch {
	case code == logSupported && sub == 0:
		params = append([]byte(nil), logPages...)
	case code == logSupported && sub == logSubpagesList:
		spf = true
		for _, p := range logPages {
			params = append(params, p, 0)
			if p == logSupported {
				params = append(params, logSupported, logSubpagesList)
			}
		}
	case sub != 0:
		return nil, InvalidCDBField(3, 7)
	case code == logWriteErrors || code == logReadErrors:
		n := x.lu.logs.readErrs.Load()
		if code == logWriteErrors {
			n = x.lu.logs.writeErrs.Load()
		}
		// 0000h-0004h: errors corrected (without, with possible delay),
		// rewrites or rereads, total corrected, times correction ran;
		// 0006h: total uncorrected errors. Cumulative values only.
		for _, p := range []uint16{0, 1, 2, 3, 4, 6} {
			v := uint64(0)
			if p == 6 && pc == 1 {
				v = n
			}
			params = appendLogParam(params, p, ptr, 0x00, counter(v))
		}
	case code == logTemperature:
		// TSD, format and linking 11b (SPC-4 7.3.21).
		params = appendLogParam(params, 0, ptr, 0x23, []byte{0, 0xff}) // temperature: not available
		params = appendLogParam(params, 1, ptr, 0x23, []byte{0, 0xff}) // reference temperature: none
	case code == logInfoExcept:
		// ASC/ASCQ 00/00: no failure predicted; most recent temperature
		// reading: not available. Format and linking 11b.
		params = appendLogParam(params, 0, ptr, 0x03, []byte{0, 0, 0xff})
	default:
		return nil, InvalidCDBField(2, 5)
	}
	if code == logSupported && ptr != 0 || code != logSupported && len(params) == 0 {
		return nil, InvalidCDBField(5, 7) // a parameter pointer past the last parameter
	}
	b := make([]byte, 4, 4+len(params))
	b[0] = code
	if spf {
		b[0] |= 0x40
		b[1] = sub
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(params)))
	return alloc(append(b, params...), allocLen), nil
}

// appendLogParam appends one log parameter (SPC-4 7.3.2) whose code is at
// least the parameter pointer, with its control byte.
func appendLogParam(b []byte, code, ptr uint16, control byte, value []byte) []byte {
	if code < ptr {
		return b
	}
	b = binary.BigEndian.AppendUint16(b, code)
	b = append(b, control, byte(len(value)))
	return append(b, value...)
}

func counter(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
