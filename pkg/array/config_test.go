package array
